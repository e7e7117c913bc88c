"""dispatch-admission: the controller that holds dispatch's readmission gate, built on kopf.

It decides, as the single leader of Lease ``dispatch-system/dispatch-admission``, when a
Workload's ``dispatch-admission`` check may go Ready (no pod of the previous execution left),
raising the admission count A on the TrainJob exactly once per admission; it serves, on every
replica, the mutating webhook that gives every pod of a dispatch job its execution identity;
it keeps the AdmissionCheck ``Active`` condition and releases expired Kueue-mode holds.

Three layers:

* **kopf: lifecycle and watch intake** (:mod:`admission.operator`). ``kopf.operator`` runs
  the process: signals, ``on.startup`` (health and metrics, TLS, the webhook, then the
  Lease campaign once the indexes are warm) and ``on.cleanup`` (the ordered shutdown that
  writes ``Active=False`` and releases the Lease); ``on.login`` from the same
  ``--kubeconfig``/``--context``; watches of Workloads, pods (``jobset-name`` label, server
  side), ClusterQueues and AdmissionChecks, kept as ``@kopf.index`` indexes and passed on
  by ``@kopf.on.event`` handlers (:mod:`admission.intake`). kopf runs standalone (no
  KopfPeering: the Lease elects, and standbys keep their indexes warm) and clusterwide.
  kopf writes nothing into anyone's objects: with only index and event handlers there are
  no finalizers, progress or last-handled-configuration annotations, its persistence
  settings are inert anyway, and its Event posting is off.
* **Kube: every write and every read a decision rests on.** Before it writes, a decision
  re-reads through :class:`dispatch_kubeflow.kube.KubeAPI` (the Workload, a live list of the
  job's pods, the TrainJob, the Lease), so kopf's indexes only say *when* to look, never
  *what is true*; Kube's error mapping, retries and counters apply to every write.
* **Pure decisions**: :func:`admission.decision.decide` and
  :func:`dispatch_kubeflow.core.admission_count.plan_admission`, :mod:`admission.checks`,
  :mod:`admission.holds`, the webhook's :func:`~admission.pod_identity.identity_for`, and the
  Lease rules of :mod:`admission.lease` are functions of the objects, unit-tested without a
  cluster.

Between kopf and the decisions sits a keyed work queue (:mod:`admission.workqueue`): a
decision is about several objects at once (a pod's deletion re-judges its job's Workload),
so kopf's per-object handlers only enqueue, and workers judge level-triggered.

Each concept has its own module: :mod:`~admission.lease`, :mod:`~admission.checks`,
:mod:`~admission.decision` (what to do with a Workload, pure), :mod:`~admission.readmission`
(doing it: :mod:`~admission.triggers` says when, :mod:`~admission.reads` what it reads),
:mod:`~admission.gate_lift`, :mod:`~admission.holds`, :mod:`~admission.webhook`,
:mod:`~admission.tls`, :mod:`~admission.observability`; :mod:`~admission.app` wires the parts
and orders their start and stop.
"""
