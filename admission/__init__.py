"""dispatch-admission: the controller that holds dispatch's readmission gate.

It decides, as the single leader of Lease ``dispatch-system/dispatch-admission``, when a
Workload's ``dispatch-admission`` check may go Ready (no pod of the previous execution left),
raising the admission count A on the TrainJob exactly once per admission; it serves, on every
replica, the mutating webhook that gives every pod of a dispatch job its execution identity;
it keeps the AdmissionCheck ``Active`` condition and releases expired Kueue-mode holds.

Why the watches do not go through kopf (and kopf is not run at all):

* One transport. Every request goes through :class:`dispatch_kubeflow.kube.Kube` (its error
  mapping, counters and 410 re-listing). kopf brings its own API client and, once its
  operator runs, its own cluster scanning (API discovery, a CustomResourceDefinition watch)
  even with no resource handlers; "kopf for lifecycle only" would still be a second
  transport, with RBAC of its own, for nothing the controller needs.
* A decision is about several objects at once: a Workload, every pod of its job (terminating
  ones included), the TrainJob, the AdmissionChecks. A pod's deletion has to re-evaluate a
  *Workload*. kopf's handlers are per object and per event, so a level-triggered work queue
  over shared caches would be needed anyway; kopf would only be feeding it.
* Leadership is a client-go style Lease that gates approving writes (confirmed by a GET
  before each), while caches keep running on every replica so a new leader decides at once.
  kopf's peering freezes whole operators (and its handlers, including the ones feeding
  caches) through KopfPeering objects, which is neither the Lease the adapter reads as
  the heartbeat nor a warm standby.
* Kueue's and Trainer's objects must stay as found. With no kopf handlers there are no
  finalizers, progress or last-handled-configuration annotations to configure away.

So :mod:`admission.app` owns the lifecycle (signals, ordered shutdown that releases the
Lease), :mod:`admission.informer` the watches (``Kube.observe``), and each concept has its
own module: :mod:`~admission.lease`, :mod:`~admission.checks`, :mod:`~admission.readmission`,
:mod:`~admission.holds`, :mod:`~admission.webhook`, :mod:`~admission.tls`,
:mod:`~admission.observability`.
"""
