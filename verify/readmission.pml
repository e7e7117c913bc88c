/*
 * readmission.pml: the readmission protocol of dispatch-admission, for spin.
 * Explained in docs/readmission-model.md; checked by verify/run.py (make verify).
 *
 * Two controller replicas elect a leader on a Lease. The leader approves a Workload at the
 * readmission gate (admission/readmission.py) while Kueue, Trainer and the kubelet do what
 * they do, and the user holds and releases the job. Every step below is one atomic request
 * to the API server (or one decision of a controller); between any two steps any other
 * step may happen. That is how a replica is slow or stalls: it takes no step for a while,
 * its lease expires meanwhile, and it carries on from where it was.
 *
 * Properties (assertions, at the step where each can first break):
 *   (a) never pods of two executions at once;
 *   (b) A rises exactly once per admission: never twice with one token, and every
 *       execution starts with its own admission's token recorded (an admission is one
 *       quota reservation of the Workload, named by the token <uid>/<evictions>);
 *   (c) each execution's R is strictly higher than the previous one's (and all pods of
 *       one execution have the same R).
 *
 * Variants, by preprocessor macro (spin -DNAME -a readmission.pml):
 *   NOFENCE       the Ready apply carries no metadata.resourceVersion: it always applies.
 *                 Must fail: a stale decision approves, (a) or (b) or (c) breaks.
 *   NOEVICTGUARD  decide() ignores the Workload's Evicted condition. Must fail: one
 *                 healthy leader approves a reservation that Kueue is tearing down.
 *   TOKENEQ       plan_admission() raises A whenever the recorded token differs from the
 *                 decision's, not only when it is older. Must fail: a stale raise lands
 *                 after a newer admission's, (b) or (c) breaks.
 *   CACHEDPODS    the pods come from the replica's cache, like the Workload and the
 *                 TrainJob, instead of a live list. Must fail: a cache that missed the
 *                 previous execution's pods approves while they are still there.
 *   LEASECONFIRM  before each write the replica also GETs the Lease and goes on only if
 *                 it names this replica (the confirms of the protocol before issue 11).
 *                 Verifies too: the confirms add no safety to the fenced writes.
 *   NOLEADER      no leadership check at all in the decision: both replicas decide all
 *                 the time. Verifies too: safety rests on the fences, not on the Lease.
 *   RVCOUNTER     resourceVersions as literal counters (the default stores only the result
 *                 of the one comparison ever made with them; same behaviours, more states).
 *   MAXHOLD=n     how many times the user holds (and may release) the job; default 2.
 *   PROPS=n       which properties to check, a bit mask: 1 (a), 2 (b), 4 (c); default 7.
 * Crashes and stalls are unbounded. The printf lines tell a trail's story (spin -t).
 */

#ifndef MAXHOLD
#define MAXHOLD 2
#endif
#ifndef PROPS
#define PROPS 7
#endif
#define NPOD 2            /* pods per execution: a two-node TrainJob */
#define NONE 2            /* no replica */

/* --- the Lease dispatch-system/dispatch-admission ------------------------------------ */
byte holder = NONE;       /* spec.holderIdentity */
bool fresh = false;       /* the lease duration has not passed since the holder last wrote */
bool leading[2];          /* each replica's own is_leader(): renewed within its deadline */

/* --- the Workload -------------------------------------------------------------------- */
bool wl_active = true;    /* spec.active (false: held) */
bool quota = false;       /* QuotaReserved=True, status.admission set */
bool evicted = false;     /* Evicted=True: Kueue is tearing the reservation down */
bool admitted = false;    /* Admitted=True: Kueue latches it until the next eviction */
bool ready = false;       /* our check's state: Ready, else Pending */
byte msg = 0;             /* our check's message: N of "waiting for N pods ...", else 0 */
byte ev = 0;              /* status.schedulingStats.evictions[].count, summed */

/* --- the TrainJob -------------------------------------------------------------------- */
bool suspended = true;    /* spec.suspend */
byte A = 0;               /* annotation admission-count */
byte tok = 0;             /* annotation admission-token, as ev+1 of the admission that
                             raised A last (one Workload: the uid part is constant); 0: none */

/* --- resourceVersions ----------------------------------------------------------------
 * A write's precondition compares the version a replica read with the current one, and
 * every write makes a new version. So "rv read == rv now" holds exactly when nothing wrote
 * the object since the read: by default the model keeps that truth per replica and object,
 * RVCOUNTER keeps the numbers themselves (bounded here by 250 writes). */
#ifdef RVCOUNTER
byte wl_rv = 1, tj_rv = 1;
byte wl_seen[2], tj_seen[2];            /* the rv each replica's decision read; 0: none */
#define WL_WRITE    wl_rv++; assert(wl_rv < 250)
#define TJ_WRITE    tj_rv++; assert(tj_rv < 250)
#define WL_READ     wl_seen[me] = wl_rv
#define TJ_READ     tj_seen[me] = tj_rv
#define TJ_OLDER    tj_seen[me] = 0
#define WL_SAME     (wl_seen[me] == wl_rv)
#define TJ_SAME     (tj_seen[me] == tj_rv)
#define FORGET_RV   wl_seen[me] = 0; tj_seen[me] = 0
#else
bool wl_same[2], tj_same[2];            /* nothing wrote the object since the version this
                                           replica's decision read */
#define WL_WRITE    wl_same[0] = false; wl_same[1] = false
#define TJ_WRITE    tj_same[0] = false; tj_same[1] = false
#define WL_READ     wl_same[me] = true
#define TJ_READ     tj_same[me] = true
#define TJ_OLDER    tj_same[me] = false
#define WL_SAME     wl_same[me]
#define TJ_SAME     tj_same[me]
#define FORGET_RV   wl_same[me] = false; tj_same[me] = false
#endif

/* --- each replica's caches: kopf's indexes (admission/intake.py) --------------------
 * A watch delivers versions in order, late by any amount, so a cache holds some version
 * that was current at some moment in the past. The decision reads the Workload and the
 * TrainJob from there.
 * - The Workload is the decision's first read: a version that was current at some
 *   earlier moment, read from the cache now, is to everything after it the same as a
 *   GET at that moment followed by a stall until now. READ_WL is that GET; the stall is
 *   any interleaving.
 * - The TrainJob is read after the pods are listed, but its cached version may be older
 *   than the list and than the Workload's version. READ_TJ reads either the current
 *   version or an older one: being older, it fails the rv precondition of RAISE, and its
 *   token is one the TrainJob had, so not higher than the current one (RAISE only ever
 *   writes a higher token, under the TrainJob's rv). Any such token may be read. That
 *   is more than a cache can hold (a cache is per replica and moves forward), which is
 *   safe: a property that holds with more behaviours holds with fewer.
 * CACHEDPODS: a cache of the pod count too, exact (the last count it took), so that a
 * counterexample found with it is one a real cache can produce. */
#ifdef CACHEDPODS
byte c_npods[2];
#endif

/* --- pods, and the bookkeeping of the properties ------------------------------------- */
byte npods = 0;           /* pods of the job that exist, terminating ones included */
byte pexec = 0;           /* the execution they belong to */
byte nexec = 0;           /* executions so far: one per unsuspend of the TrainJob */
byte ncreated = 0;        /* pods created for execution nexec */
byte lastR = 0;           /* R of the latest execution that had a pod */
bool own_token = false;   /* at the latest unsuspend, the recorded token was the admission's */
byte raised = 0;          /* bit t: A was raised with token t */
byte holds = 0;

/* --- one replica: its leader elector and its decision (Readmission._act) ------------- */
#define IDLE      0       /* waiting for an event */
#define READ_WL   1       /* reconcile() saw it lead: the Workload from the cache, decide() */
#define LIST      2       /* list the job's pods, live, terminating ones included */
#define WAIT      3       /* pods left: apply the check Pending, "waiting for N pods" */
#define READ_TJ   4       /* none left: the TrainJob from the cache, plan_admission() */
#define CONFIRM1  5       /* is_leader() before raising A (LEASECONFIRM: and GET the Lease) */
#define RAISE     6       /* merge patch A+1 and the token, TrainJob rv as precondition */
#define CONFIRM2  7       /* is_leader() before approving (LEASECONFIRM: and GET the Lease) */
#define APPROVE   8       /* apply the check Ready, fenced by the Workload rv read */

/* decide(): the check is Pending, the Workload active, its quota reserved and (the
 * eviction guard) not Evicted, for a reservation Kueue is tearing down is no admission. */
#ifdef NOEVICTGUARD
#define OURS      (!ready && wl_active && quota)
#else
#define OURS      (!ready && wl_active && quota && !evicted)
#endif

/* the decision is over, or lost with the process: forget what it read */
#define FORGET    pc = IDLE; ev_r = 0; msg_r = 0; pods_r = 0; FORGET_RV

/* The leadership check before a write: is_leader(), the elector's own state, no request.
 * LEASECONFIRM: confirm(), is_leader() and a GET of the Lease that names this replica.
 * NOLEADER: none, and a decision starts whether the replica leads or not. */
#if defined(NOLEADER)
#define CONFIRMED true
#define MAYDECIDE true
#elif defined(LEASECONFIRM)
#define CONFIRMED (leading[me] && holder == me)
#define MAYDECIDE leading[me]
#else
#define CONFIRMED leading[me]
#define MAYDECIDE leading[me]
#endif

proctype Replica(byte me) {
  byte pc = IDLE;
  byte ev_r, msg_r, pods_r;   /* what this decision read */

  do
  /* The elector (admission/lease.py). One tryAcquireOrRenew round is a GET and a PUT
   * carrying the rv read: one compare-and-swap on the Lease. */
  :: d_step { holder == me -> fresh = true; leading[me] = true }        /* renew */
  :: d_step { holder != me && (holder == NONE || !fresh) ->             /* take over */
                holder = me; fresh = true; leading[me] = true;
                printf("MSC: r%d acquires the lease\n", me) }
  :: d_step { holder != me && leading[me] -> leading[me] = false }      /* sees another */

#ifdef CACHEDPODS
  /* The pods' watch: the cache takes the current count. */
  :: d_step { c_npods[me] = npods }
#endif

  /* One decision. */
  :: d_step { pc == IDLE && MAYDECIDE -> pc = READ_WL }
  :: d_step { pc == READ_WL ->
                if
                :: OURS -> WL_READ; ev_r = ev; msg_r = msg; pc = LIST;
                     printf("MSC: r%d reads the Workload from its cache: check Pending, quota reserved, %d evictions\n", me, ev)
                :: else -> FORGET                                   /* idle */
                fi }
  :: d_step { pc == LIST ->
#ifdef CACHEDPODS
                pods_r = c_npods[me];
#else
                pods_r = npods;
#endif
                if
                :: pods_r > 0 && msg_r != pods_r -> pc = WAIT;
                     printf("MSC: r%d lists %d pods\n", me, pods_r)
                :: pods_r > 0 && msg_r == pods_r -> FORGET          /* said so already */
                :: pods_r == 0 -> pc = READ_TJ; printf("MSC: r%d lists no pod\n", me)
                fi }
  /* Not fenced, and not confirmed (reconcile() asked whether it leads, long ago). */
  :: d_step { pc == WAIT ->
                ready = false; msg = pods_r; WL_WRITE;
                printf("MSC: r%d writes the check Pending: waiting for %d pods\n", me, pods_r);
                FORGET }
  /* The TrainJob from the cache, the current version: plan_admission() */
  :: d_step { pc == READ_TJ ->
                TJ_READ;
                if
                :: tok == ev_r + 1 -> pc = CONFIRM2;    /* this admission raised A already */
                     printf("MSC: r%d reads the TrainJob from its cache: A = %d, raised for this admission\n", me, A)
#ifdef TOKENEQ
                :: tok != ev_r + 1 -> pc = CONFIRM1;
                     printf("MSC: r%d reads the TrainJob from its cache: A = %d, token of another admission\n", me, A)
#else
                :: tok < ev_r + 1 -> pc = CONFIRM1;     /* an older admission raised it */
                     printf("MSC: r%d reads the TrainJob from its cache: A = %d, not raised for this admission\n", me, A)
                :: tok > ev_r + 1 -> FORGET;            /* a newer one did: our read is old */
                     printf("MSC: r%d reads the TrainJob from its cache: raised for a newer admission\n", me)
#endif
                fi }
  /* ...or an older version, which fails the rv precondition of RAISE. Its token is one the
   * TrainJob had: this admission's only if the current one is this admission's or newer
   * (tokens only rise), else an older admission's (a newer one's would end the decision,
   * as above). */
  :: d_step { pc == READ_TJ && tok >= ev_r + 1 -> TJ_OLDER; pc = CONFIRM2;
                printf("MSC: r%d reads an older TrainJob from its cache: raised for this admission\n", me) }
  :: d_step { pc == READ_TJ -> TJ_OLDER; pc = CONFIRM1;
                printf("MSC: r%d reads an older TrainJob from its cache: not raised for this admission\n", me) }
  :: d_step { pc == CONFIRM1 ->
                if
                :: CONFIRMED -> pc = RAISE; printf("MSC: r%d leads, by its own state\n", me)
                :: else -> FORGET
                fi }
  :: d_step { pc == RAISE ->
                if
                :: TJ_SAME ->
#if (PROPS & 2)
                     assert((raised & (1 << (ev_r + 1))) == 0);     /* (b) once a token */
#endif
                     raised = raised | (1 << (ev_r + 1));
                     A++; tok = ev_r + 1; TJ_WRITE; pc = CONFIRM2;
                     printf("MSC: r%d raises A to %d, token of admission %d\n", me, A, ev_r)
                :: else -> FORGET                                   /* 409: judge again */
                fi }
  :: d_step { pc == CONFIRM2 ->
                if
                :: CONFIRMED -> pc = APPROVE; printf("MSC: r%d leads, by its own state\n", me)
                :: else -> FORGET
                fi }
  :: d_step { pc == APPROVE ->
                if
#ifdef NOFENCE
                :: true -> ready = true; msg = 0; WL_WRITE;
                     printf("MSC: r%d writes the check Ready (no fence)\n", me)
#else
                :: WL_SAME -> ready = true; msg = 0; WL_WRITE;      /* the fence */
                     printf("MSC: r%d writes the check Ready\n", me)
                :: else -> printf("MSC: r%d: the Ready write gets 409\n", me)  /* judge again */
#endif
                fi;
                FORGET }

  /* A crash, at any step: the process restarts with its local state lost and the same
   * identity (its pod's name), so it may renew its own lease at once. */
  :: d_step { pc != IDLE || leading[me] -> leading[me] = false; FORGET;
                printf("MSC: r%d crashes and restarts\n", me) }
  od
}

/* --- Kueue, Trainer (JobSet, Job), the kubelet, the user, and time ------------------- */
proctype Cluster() {
  do
  /* The user (dispatch_kubeflow.hold): hold = deactivate the Workload; release, at any
   * moment after, even before Kueue acted on the hold (so an eviction of an active
   * Workload, a preemption, is covered too). */
  :: d_step { wl_active && holds < MAXHOLD -> wl_active = false; holds++; WL_WRITE;
                printf("MSC: the user holds the job\n") }
  :: d_step { !wl_active -> wl_active = true; WL_WRITE; printf("MSC: the user releases it\n") }

  /* Kueue evicts a deactivated Workload that holds quota, in one write: Evicted=True,
   * Admitted=False, every check reset to Pending, the eviction count up by one */
  :: d_step { !wl_active && quota && !evicted ->
                evicted = true; admitted = false; ready = false; msg = 0; ev++; WL_WRITE;
                printf("MSC: Kueue evicts the Workload: check reset to Pending, %d evictions\n", ev) }
  /* Kueue's job reconciler stops a running job whose Workload is not admitted... */
  :: d_step { !suspended && !admitted -> suspended = true; TJ_WRITE;
                printf("MSC: Kueue suspends the TrainJob: its pods terminate, slowly\n") }
  /* ...and, once the job is stopped, releases the quota (pods may still be terminating:
   * a Job counts them as terminating, not active). Checks are not reset again, and
   * Evicted stays True until the next reservation. */
  :: d_step { evicted && quota && suspended -> quota = false; WL_WRITE;
                printf("MSC: Kueue releases the quota\n") }
  /* Kueue's scheduler reserves quota for an active Workload (a release requeues it),
   * and sets Evicted=False */
  :: d_step { wl_active && !quota -> quota = true; evicted = false; WL_WRITE;
                printf("MSC: Kueue reserves quota\n") }
  /* Kueue admits an active Workload with quota reserved and every check Ready. (Kueue
   * evicts a deactivated Workload first, and writes its status with the resourceVersion
   * it read, so it never admits one whose hold it has not seen. Dropping wl_active here
   * adds no reachable state.) */
  :: d_step { wl_active && quota && ready && !admitted && !evicted -> admitted = true; WL_WRITE;
                printf("MSC: Kueue admits the Workload\n") }
  /* Kueue's job reconciler starts the job of an admitted Workload: a new execution */
  :: d_step { admitted && suspended ->
                own_token = (tok == ev + 1);
                suspended = false; TJ_WRITE; nexec++; ncreated = 0;
                printf("MSC: Kueue unsuspends the TrainJob: execution %d\n", nexec) }

  /* Trainer/JobSet/Job create a pod of the running job; the identity webhook reads A
   * fresh from the TrainJob: R = A + J, and J = 0 (JobSet restarts only raise R) */
  :: d_step { !suspended && ncreated < NPOD ->
                printf("MSC: a pod of execution %d starts with R = %d (%d pods exist)\n",
                       nexec, A, npods);
#if (PROPS & 1)
                assert(npods == 0 || pexec == nexec);              /* (a) */
#endif
                if
                :: ncreated == 0 ->
#if (PROPS & 4)
                     assert(A > lastR);                            /* (c) R rises */
#endif
#if (PROPS & 2)
                     assert(own_token);                            /* (b) raised for it */
#endif
                     lastR = A
                :: else ->
#if (PROPS & 4)
                     assert(A == lastR)                            /* (c) one R each */
#else
                     skip
#endif
                fi;
                npods++; ncreated++; pexec = nexec }
  /* the kubelet: a pod ends, after any delay: a stopped job's pod may linger, and a
   * running job's pod may end too (it fails or succeeds; JobSet restarts not modelled) */
  :: d_step { npods > 0 -> npods--; printf("MSC: a pod is gone (%d left)\n", npods) }

  /* Time. A replica's renew deadline passes (it stops leading by its own clock), and,
   * independently, the lease duration passes without a renewal, so another replica may
   * take over. Independent on purpose: client-go measures both by local clocks, and a
   * slow renew response can leave the old holder leading after the other took over. */
  :: d_step { leading[0] -> leading[0] = false }
  :: d_step { leading[1] -> leading[1] = false }
  :: d_step { holder != NONE && fresh -> fresh = false;
                printf("MSC: r%d's lease expires\n", holder) }
  od
}

init {
  atomic { run Replica(0); run Replica(1); run Cluster() }
}
