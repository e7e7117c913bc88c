"""StopJob: delete everything of a job, and prove it is gone, with few requests.

What belongs to a job is :mod:`dispatch_kubeflow.find`'s to say, among the kinds the mode
names (Kueue mode: Workloads too). Each part of StopJob, and the part of the proof it
carries, sits in its own module:

- :mod:`.passes`: ``stop_job`` and its passes (list, delete, release, wait, report);
- :mod:`.views`: a kind's view, the order kinds are listed in, and why every view empty
  proves the job gone;
- :mod:`.sharing`: the one place that picks each kind's view: its own list and watch, or
  the Backend's informer; and why following an informer proves as much as a watch;
- :mod:`.rounds`: a crowd of a Backend's stops (:class:`Crowd`, owned by the Backend beside
  its informers) and the shared lists it makes;
- :mod:`.deletes`: what StopJob deletes itself, when, and why background propagation;
- :mod:`.finalizers`: the Job controller's job-tracking finalizer StopJob may release;
- :mod:`.reason`: the reason, as an Event on each TrainJob;
- :mod:`.report`: what was stopped, what is alive, what is unproven (across a MultiKueue
  manager and its workers too);
- :mod:`.limits`: its waits and the crowd's size.
"""

from dispatch_kubeflow.stop.limits import LIMITS, Limits
from dispatch_kubeflow.stop.passes import stop_feeds, stop_job
from dispatch_kubeflow.stop.reason import REPORTING_CONTROLLER, record_reason
from dispatch_kubeflow.stop.report import across
from dispatch_kubeflow.stop.rounds import Crowd

__all__ = ["LIMITS", "REPORTING_CONTROLLER", "Crowd", "Limits", "across", "record_reason",
           "stop_feeds", "stop_job"]
