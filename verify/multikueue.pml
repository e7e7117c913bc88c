/*
 * multikueue.pml: the worker permit across clusters, for spin. The design is
 * docs/multikueue-fence.md (its section "The model" explains this file); checked by
 * verify/run.py (make verify), next to readmission.pml.
 *
 * A Kueue manager cluster dispatches one dispatch job, through MultiKueue, to one of two
 * worker clusters, w0 and w1. The manager runs dispatch's readmission gate, its permit
 * revoker, and MultiKueue. Each worker runs an agent (dispatch-admission in worker mode: it
 * renews its permit in the manager, answers its pods "how long", and its webhook admits
 * dispatch pods only while it holds the permit) and the job's pod, with its fence. Each
 * worker's link to the manager can be cut and healed. Every step below is one atomic request
 * or decision; between any two steps any other step may happen, so any process may be slow
 * or stall, for as long as time allows.
 *
 * Clocks. These are the assumptions the design rests on, and how the model takes them:
 *   - No synchronized clocks: no decision reads another host's time of day; each host
 *     measures durations on its own clock. Real time advances by a global tick, the step of
 *     the process Time. Each clock's reading is kept as a countdown that the tick lowers:
 *     the ticks left until a permit, a share, or a wait runs out, in real time. (That is the
 *     same as an absolute `now` and deadlines, and time is not bounded: a state is the same
 *     state at any tick, so the search covers runs of any length.)
 *   - Bounded drift: each clock runs at a rate within rho of real time; over one permit
 *     (PERMIT ticks) a clock drifts by DRIFT ticks at most. A worker's clock and a pod's may
 *     run slow: an agent that holds its permit until tick e on its clock may still admit and
 *     answer until tick e + DRIFT, and a pod whose share ends at tick e kills its processes
 *     somewhere in ticks e .. e + DRIFT; time does not pass tick e + DRIFT until it has. (A
 *     clock that runs fast only stops them sooner, which a pod ending at any moment covers.)
 *     The manager's clock may run fast: its wait of REVWAIT ticks may be DRIFT ticks short.
 *   - Ticks are coarse: events within one tick are in any order. So the manager waits one
 *     tick beyond the bound: REVWAIT = PERMIT + MARGIN + 1, with MARGIN = 2 * DRIFT (the
 *     design's margin T(1+rho)/(1-rho) - T, for a slow worker clock and a fast manager clock:
 *     0 with no drift).
 *   - Message delays are unbounded: a renewal lands any time after it was sent (also while
 *     the link is cut: it was on its way), or never; its reply arrives any time after it
 *     landed, or never. Safety does not depend on them.
 *
 * What is modelled:
 *   The gate   while the job's check is Pending and MultiKueue has not dispatched it, it
 *              approves when, for each worker, either the worker is reachable and a live
 *              list there shows no alive pod of the job (DELETEREMOTES: and no remote
 *              TrainJob of it), or the worker's permit is revoked; it raises A and sets the
 *              check Ready, in one step.
 *   The revoker  the manager saw the permit Lease of w unchanged (no renewal landed) for
 *              REVWAIT ticks of its clock, and writes "revoked" on exactly that version (a
 *              compare-and-swap: a renewal that lands after it gets 409, and one that landed
 *              before restarted the wait). NOREVOKE: no write; the gate takes the wait alone
 *              as revocation.
 *   MultiKueue  once the check is Ready, dispatches the job to one connected worker: its
 *              remote TrainJob carries A. When that worker has been cut off for WORKER_LOST
 *              ticks (from the drop), the check goes to Retry and every check is reset to
 *              Pending: the gate must approve again, and MultiKueue dispatches again, maybe to
 *              the other worker. A cut-off worker keeps its remote objects; MultiKueue deletes
 *              the job's remote objects on a reachable worker it has not dispatched the job
 *              to, at some moment. (DELETEREMOTES: also the retry of a reachable worker whose
 *              remote is gone.)
 *   Agents     each renews its permit, while its link is up, by an update of its Lease with
 *              the version it holds as precondition, one request at a time; on success it
 *              holds the permit until s0 + PERMIT, s0 the tick it sent the request (LATESTART:
 *              the tick the reply arrived). Both Leases are granted at the start. A renewal
 *              that gets 409 tells the agent its permit is revoked: it drops it
 *              (DELETEREMOTES: deletes the remote TrainJob in its cluster), waits until no
 *              dispatch pod of its is left, alive or waiting to start (REGRANTANY: does not
 *              wait), and, its link up, asks the manager to grant again: the manager writes
 *              "granted" on the revoked version, and the agent holds the permit from then.
 *   Pods       one rank per execution: at most one pod of the job in a worker (the worker's
 *              own single-cluster pod fence keeps two executions apart there). The remote
 *              TrainJob's Job makes a pod, again after one ended, through the worker's
 *              webhook, which admits it while the agent holds the permit; the pod gets the
 *              remote's A, and asks the agent "how long" before its workload starts. The
 *              agent reads the job's Workload in the manager, live (its link up): only if the
 *              pod's A is the job's admission count and the job is dispatched to this worker
 *              does it answer (NOCONFIRM: no read); it answers later, from the permit it holds
 *              then, and the pod runs until the permit's end, renews its share while the
 *              agent holds the permit, and kills its processes when its share runs out
 *              (NOSELFFENCE: never). A pod may also end at any moment (it fails, or goes with
 *              a deleted remote).
 *   Links      each worker's link to the manager is cut (MAXCUT cuts in all) and healed.
 *
 * Properties (assertions, at the step where each can first break):
 *   (a) never alive pods of two executions at once, in any clusters (a pod is alive from
 *       the start of its workload until its processes end; a pod that waits for its answer
 *       runs nothing, though the gate's list counts it);
 *   (c) each execution's identity A is strictly higher than the previous one's, whichever
 *       worker runs it: a pod starts its workload only at the job's latest admission, so no
 *       execution starts at an identity a readmission has passed.
 * Not modelled: holds (a hold across clusters is not required here); the single-cluster
 * protocol inside a worker (its Kueue, Workload, JobSets, attempts); more than one rank, job
 * or manager replica; an agent that crashes (like one whose requests never land); a second
 * renewal while one is in flight (an abandoned request that lands only restarts the
 * manager's wait); the grant again as a delayed request (no pod can appear while the agent
 * holds no permit, so a late grant is the same); a late answer to a pod (it only shortens
 * the share); MultiKueue picking a stale remote on a worker that comes back (docs/
 * multikueue-upstream.md, section 4; the confirmation refuses its pods the same way).
 *
 * Rules of the protocol, and what removing one does (verify/run.py asserts each):
 *   NOSELFFENCE    pods never fence themselves. Must fail (a): the cut-off worker's pod
 *                  runs on beside the execution dispatched again to the other worker.
 *   NOREVOKE       the gate approves once the wait is over, with no write. Must fail: a
 *                  renewal in flight lands after, and the cut-off worker holds a permit again.
 *   NOMARGIN       the manager waits PERMIT (and the tick), not PERMIT + MARGIN. Must fail
 *                  with DRIFT > 0 (and verifies with DRIFT = 0: the margin is for drift).
 *   LATESTART      the agent measures its permit from the reply's arrival. Must fail.
 *   NOCONFIRM      the agent answers without reading the job's Workload (the design as
 *                  first written). Must fail (c): a remote TrainJob left on a worker that
 *                  comes back makes a pod at an identity a readmission passed.
 *   DELETEREMOTES  with NOCONFIRM: the gate also waits for a reachable worker's remote
 *                  objects to be gone, and a revoked agent deletes them before it asks again.
 *                  Must fail still: MultiKueue dispatches to the revoked worker after the
 *                  deletion, and that remote is left behind when the worker is lost.
 *   REGRANTANY     the manager grants again without the pods gone. Must fail: a pod
 *                  confirmed before the readmission starts on the new permit.
 *   TWOREADS       the agent's read as the code sends it, two requests: the job's
 *                  Workload (dispatched here?), then its TrainJob (the pod's A?). Verifies:
 *                  a pod at A exists only once admission A was dispatched here, and the gate
 *                  raises A only while nothing is dispatched.
 *   TJFIRST        with TWOREADS, the TrainJob read first. Must fail (c): A is read, then
 *                  the job is readmitted and dispatched to the same worker, and the Workload
 *                  read says "here" for the pod of the passed A.
 * Bounds: PERMIT (3), DRIFT (1), WORKER_LOST (1), MAXCUT (1), MAXA (approvals, 2).
 * PROPS: which properties to check, 1 (a), 4 (c); default 5.
 * The printf lines tell a trail's story (spin -t).
 */

#ifndef PERMIT
#define PERMIT 3
#endif
#ifndef DRIFT
#define DRIFT 1
#endif
#ifdef NOMARGIN
#define MARGIN 0
#else
#define MARGIN (2 * DRIFT)
#endif
#define REVWAIT (PERMIT + MARGIN + 1)
#ifndef WORKER_LOST
#define WORKER_LOST 1
#endif
#ifndef MAXCUT
#define MAXCUT 1
#endif
#ifndef MAXA
#define MAXA 2
#endif
#ifndef PROPS
#define PROPS 5
#endif
#define NONE 2                  /* no worker */
#define FULL (PERMIT + DRIFT + 1)   /* a permit measured from this tick, as a countdown: the
                                       agent holds it while > 0 */

/* --- the links between the manager and each worker --------------------------------- */
bool link[2] = true;
byte ncut = 0;                  /* cuts so far */
byte lost[2];                   /* ticks until MultiKueue counts the cut-off worker lost */

/* --- the manager: the job's Workload, the permit Leases ------------------------------ */
byte A = 0;                     /* the admission count */
bool ready = false;             /* dispatch's check: Ready, else Pending */
byte disp = NONE;               /* the worker MultiKueue dispatched the job to */
bool revoked[2];                /* the permit Lease dispatch-worker-<w> says revoked */
byte mt[2] = REVWAIT - DRIFT;   /* the manager's wait on the Lease's current version: ticks
                                   left in real time, its clock fast by DRIFT */
#define EXPIRED(w) (mt[w] == 0)

/* --- the worker agents --------------------------------------------------------------- */
#define IDLE      0             /* holds the version it last wrote */
#define SENT      1             /* a renewal in flight */
#define REPLY_OK  2             /* it landed; the reply is on its way */
#define REPLY_409 3             /* it failed: the Lease was revoked */
#define REVOKED   4             /* knows its permit revoked: waits for its pods to be gone */
#define CLEARED   5             /* (DELETEREMOTES) ...and deleted the remote objects */
byte ag[2];
byte hold[2] = FULL;            /* the agent holds its permit while > 0: ticks left in real
                                   time, its clock slow by DRIFT */
byte rq[2];                     /* the renewal in flight: what its reply gives if it arrives
                                   now (measured from the sending) */
#define HOLDS(w)  (hold[w] > 0)

/* --- remote objects and pods, in each worker ----------------------------------------- */
byte remote[2];                 /* the remote TrainJob's A; 0: none */
#define NOPOD     0
#define CREATED   1             /* made through the webhook; it asked "how long" */
#define CONFIRMED 2             /* the agent read the job's Workload: the pod's A is the
                                   job's and the job is dispatched here; no answer yet */
#define RUNNING   3             /* its workload runs */
#define FIRSTREAD 4             /* (TWOREADS) the first of the agent's two reads passed */
byte pod[2];
byte pA[2];                     /* the pod's identity: its remote's A */
byte fz[2];                     /* ticks until the pod must have fenced; its fence may fire
                                   once it is DRIFT or less */

#define OTHER(w)  (1 - (w))
#ifdef NOREVOKE
#define REVOKED_SEEN(w) EXPIRED(w)
#else
#define REVOKED_SEEN(w) revoked[w]
#endif
/* the gate's rule for worker w */
#ifdef DELETEREMOTES
#define CLEAR(w)  ((link[w] && remote[w] == 0 && pod[w] == NOPOD) || REVOKED_SEEN(w))
#else
#define CLEAR(w)  ((link[w] && pod[w] == NOPOD) || REVOKED_SEEN(w))
#endif

#ifdef NOSELFFENCE
#define URGENT    false
#else
/* a running pod whose share ran out DRIFT ticks ago must fence before time goes on */
#define URGENT    ((pod[0] == RUNNING && fz[0] == 0) || (pod[1] == RUNNING && fz[1] == 0))
#endif
#define DOWN(x)   x = (x > 0 -> x - 1 : 0)
#define TICK(w)   DOWN(lost[w]); DOWN(mt[w]); DOWN(hold[w]); DOWN(rq[w]); DOWN(fz[w])

proctype Time() {
  do
  :: d_step { !URGENT -> TICK(0); TICK(1); printf("MSC: a tick passes\n") }
  od
}

proctype Partition() {
  do
  :: d_step { ncut < MAXCUT && link[0] -> link[0] = false; ncut++; lost[0] = WORKER_LOST;
                printf("MSC: the link to w0 is cut\n") }
  :: d_step { ncut < MAXCUT && link[1] -> link[1] = false; ncut++; lost[1] = WORKER_LOST;
                printf("MSC: the link to w1 is cut\n") }
  :: d_step { !link[0] -> link[0] = true; lost[0] = 0; printf("MSC: the link to w0 heals\n") }
  :: d_step { !link[1] -> link[1] = true; lost[1] = 0; printf("MSC: the link to w1 heals\n") }
  od
}

/* what the gate's approval says of each worker */
#ifdef NOREVOKE
#define SAID_BOTH printf("MSC: the gate approves: A = %d, check Ready (both permits timed out)\n", A)
#define SAID_W0   printf("MSC: the gate approves: A = %d, check Ready (w0's permit timed out, w1 lists no pod)\n", A)
#define SAID_W1   printf("MSC: the gate approves: A = %d, check Ready (w0 lists no pod, w1's permit timed out)\n", A)
#else
#define SAID_BOTH printf("MSC: the gate approves: A = %d, check Ready (both permits revoked)\n", A)
#define SAID_W0   printf("MSC: the gate approves: A = %d, check Ready (w0's permit revoked, w1 lists no pod)\n", A)
#define SAID_W1   printf("MSC: the gate approves: A = %d, check Ready (w0 lists no pod, w1's permit revoked)\n", A)
#endif

proctype Manager() {
  do
  /* the readmission gate */
  :: d_step { !ready && disp == NONE && A < MAXA && CLEAR(0) && CLEAR(1) ->
                A++; ready = true;
                if
                :: REVOKED_SEEN(0) && REVOKED_SEEN(1) -> SAID_BOTH
                :: REVOKED_SEEN(0) && !REVOKED_SEEN(1) -> SAID_W0
                :: !REVOKED_SEEN(0) && REVOKED_SEEN(1) -> SAID_W1
                :: else ->
                     printf("MSC: the gate approves: A = %d, check Ready (w0 and w1 list no pod)\n", A)
                fi }
#ifndef NOREVOKE
  /* the revoker: the Lease unchanged for REVWAIT on the manager's clock; a CAS on it */
  :: d_step { !revoked[0] && EXPIRED(0) -> revoked[0] = true;
                printf("MSC: the manager revokes w0's permit: no renewal landed for its wait\n") }
  :: d_step { !revoked[1] && EXPIRED(1) -> revoked[1] = true;
                printf("MSC: the manager revokes w1's permit: no renewal landed for its wait\n") }
#endif
  /* MultiKueue dispatches the approved job to a connected worker */
  :: d_step { ready && disp == NONE && link[0] -> disp = 0; remote[0] = A;
                printf("MSC: MultiKueue dispatches the job to w0: a remote TrainJob, A = %d\n", A) }
  :: d_step { ready && disp == NONE && link[1] -> disp = 1; remote[1] = A;
                printf("MSC: MultiKueue dispatches the job to w1: a remote TrainJob, A = %d\n", A) }
  /* the worker it dispatched to is lost (cut off for WORKER_LOST ticks): the check goes to
   * Retry, and every check is reset to Pending */
  :: d_step { disp != NONE && !link[disp] && lost[disp] == 0 ->
                printf("MSC: MultiKueue: w%d lost: checks reset to Pending, the job to be dispatched again\n", disp);
                ready = false; disp = NONE }
#ifdef DELETEREMOTES
  /* ...or reachable, its remote gone (only the agent of DELETEREMOTES deletes one) */
  :: d_step { disp != NONE && link[disp] && remote[disp] != A ->
                printf("MSC: MultiKueue: the remote on w%d is gone: checks reset to Pending\n", disp);
                ready = false; disp = NONE }
#endif
  /* MultiKueue deletes the job's remote objects on a reachable worker it did not dispatch
   * the job to (the manager's Workload lost its reservation, or another worker admitted) */
  :: d_step { disp != 0 && link[0] && remote[0] != 0 -> remote[0] = 0;
                printf("MSC: MultiKueue deletes the remote TrainJob on w0\n") }
  :: d_step { disp != 1 && link[1] && remote[1] != 0 -> remote[1] = 0;
                printf("MSC: MultiKueue deletes the remote TrainJob on w1\n") }
  od
}

#ifdef REGRANTANY
#define PODS_GONE true
#else
#define PODS_GONE (pod[w] == NOPOD)
#endif
#ifdef DELETEREMOTES
#define ASKS_AGAIN CLEARED
#else
#define ASKS_AGAIN REVOKED
#endif

/* one worker: its agent, its webhook and the job's pod */
proctype Worker(byte w) {
  do
  /* the agent renews: an update of its Lease with the version it holds as precondition */
  :: d_step { ag[w] == IDLE && link[w] -> ag[w] = SENT; rq[w] = FULL;
                printf("MSC: w%d's agent sends a renewal\n", w) }
  /* ...which lands, whenever (the link may be cut by then): the CAS */
  :: d_step { ag[w] == SENT ->
                if
                :: !revoked[w] -> ag[w] = REPLY_OK; mt[w] = REVWAIT - DRIFT;
                     printf("MSC: w%d's renewal lands (sent %d ticks ago): a new version\n", w, FULL - rq[w])
                :: else -> ag[w] = REPLY_409; rq[w] = 0;
                     printf("MSC: w%d's renewal lands on the revoked permit: 409\n", w)
                fi }
  /* ...and its reply arrives, whenever */
  :: d_step { ag[w] == REPLY_OK ->
#ifdef LATESTART
                hold[w] = FULL;
#else
                hold[w] = rq[w];
#endif
                printf("MSC: w%d's agent gets the reply: it holds the permit (for %d ticks at most)\n", w, hold[w] - 1);
                ag[w] = IDLE; rq[w] = 0 }
  :: d_step { ag[w] == REPLY_409 -> ag[w] = REVOKED; hold[w] = 0;
                printf("MSC: w%d's agent finds its permit revoked\n", w) }
#ifdef DELETEREMOTES
  /* the revoked agent deletes the dispatch jobs' remote objects in its cluster, once */
  :: d_step { ag[w] == REVOKED ->
                if
                :: remote[w] != 0 -> remote[w] = 0;
                     printf("MSC: w%d's agent deletes the remote TrainJob there\n", w)
                :: else -> printf("MSC: w%d's agent finds no remote TrainJob to delete\n", w)
                fi;
                ag[w] = CLEARED }
#endif
  /* the revoked agent proves its dispatch pods gone and asks again; the manager grants on
   * the revoked version */
  :: d_step { ag[w] == ASKS_AGAIN && PODS_GONE && link[w] ->
                revoked[w] = false; mt[w] = REVWAIT - DRIFT; hold[w] = FULL; ag[w] = IDLE;
                printf("MSC: w%d has no dispatch pod: the manager grants its permit again\n", w) }

  /* the remote TrainJob's Job makes a pod; the webhook admits it while the agent holds the
   * permit; before its workload starts, the pod asks the agent how long */
  :: d_step { remote[w] != 0 && pod[w] == NOPOD && HOLDS(w) -> pod[w] = CREATED; pA[w] = remote[w];
                printf("MSC: w%d's webhook admits a pod of A = %d; it asks how long\n", w, pA[w]) }
#ifdef NOCONFIRM
  :: d_step { pod[w] == CREATED -> pod[w] = CONFIRMED }
#elif defined(TWOREADS) && !defined(TJFIRST)
  /* the agent's read in two requests, as the code sends them (core.permit.refusal): the
   * job's Workload first (dispatched here?), then its TrainJob (A the pod's?) */
  :: d_step { pod[w] == CREATED && link[w] ->
                if
                :: disp == w -> pod[w] = FIRSTREAD;
                     printf("MSC: w%d's agent reads the job's Workload in the manager: dispatched here\n", w)
                :: else -> pod[w] = NOPOD; pA[w] = 0;
                     printf("MSC: w%d's agent reads the job's Workload in the manager: not dispatched here: no share, the pod ends\n", w)
                fi }
  :: d_step { pod[w] == FIRSTREAD && link[w] ->
                if
                :: A == pA[w] -> pod[w] = CONFIRMED;
                     printf("MSC: w%d's agent reads the job's TrainJob in the manager: A = %d, the pod's\n", w, A)
                :: else -> printf("MSC: w%d's agent reads the job's TrainJob in the manager: A = %d, not the pod's %d: no share, the pod ends\n", w, A, pA[w]);
                     pod[w] = NOPOD; pA[w] = 0
                fi }
#elif defined(TWOREADS)
  /* TJFIRST: the same two requests the other way round, the TrainJob first */
  :: d_step { pod[w] == CREATED && link[w] ->
                if
                :: A == pA[w] -> pod[w] = FIRSTREAD;
                     printf("MSC: w%d's agent reads the job's TrainJob in the manager: A = %d, the pod's\n", w, A)
                :: else -> printf("MSC: w%d's agent reads the job's TrainJob in the manager: A = %d, not the pod's %d: no share, the pod ends\n", w, A, pA[w]);
                     pod[w] = NOPOD; pA[w] = 0
                fi }
  :: d_step { pod[w] == FIRSTREAD && link[w] ->
                if
                :: disp == w -> pod[w] = CONFIRMED;
                     printf("MSC: w%d's agent reads the job's Workload in the manager: dispatched here\n", w)
                :: else -> pod[w] = NOPOD; pA[w] = 0;
                     printf("MSC: w%d's agent reads the job's Workload in the manager: not dispatched here: no share, the pod ends\n", w)
                fi }
#else
  /* the agent reads the job's Workload in the manager, live: is the pod's A the job's
   * admission count, and the job dispatched to this worker? */
  :: d_step { pod[w] == CREATED && link[w] ->
                if
                :: A == pA[w] && disp == w -> pod[w] = CONFIRMED;
                     printf("MSC: w%d's agent reads the job's Workload in the manager: A = %d, dispatched here\n", w, A)
                :: else -> pod[w] = NOPOD;
                     printf("MSC: w%d's agent reads the job's Workload in the manager: A = %d, not the pod's %d, or not dispatched here: no share, the pod ends\n", w, A, pA[w]);
                     pA[w] = 0
                fi }
#endif
  /* ...and answers, from the permit it holds now: the pod runs until the permit's end */
  :: d_step { pod[w] == CONFIRMED ->
                if
                :: HOLDS(w) -> pod[w] = RUNNING; fz[w] = hold[w] - 1;
                     if
                     :: pod[OTHER(w)] == RUNNING ->
                          printf("MSC: w%d's pod of A = %d starts its workload (for %d ticks at most), while w%d's pod of A = %d runs\n",
                                 w, pA[w], fz[w], OTHER(w), pA[OTHER(w)])
                     :: else ->
                          printf("MSC: w%d's pod of A = %d starts its workload (for %d ticks at most); no pod runs on w%d\n",
                                 w, pA[w], fz[w], OTHER(w))
                     fi;
#if (PROPS & 1)
                     assert(pod[OTHER(w)] != RUNNING || pA[OTHER(w)] == pA[w]);   /* (a) */
#endif
#if (PROPS & 4)
                     assert(pA[w] == A);                                           /* (c) */
#endif
                     skip
                :: else -> pod[w] = NOPOD; pA[w] = 0;
                     printf("MSC: w%d's agent holds no permit: no share, the pod ends\n", w)
                fi }
  /* the pod renews its share */
  :: d_step { pod[w] == RUNNING && hold[w] > fz[w] + 1 -> fz[w] = hold[w] - 1;
                printf("MSC: w%d's pod renews its share (for %d ticks at most)\n", w, fz[w]) }
#ifndef NOSELFFENCE
  /* the self-fence: its share ran out, on the pod's clock */
  :: d_step { pod[w] == RUNNING && fz[w] <= DRIFT ->
                printf("MSC: w%d's pod of A = %d: its share ran out, it kills its processes\n", w, pA[w]);
                pod[w] = NOPOD; pA[w] = 0; fz[w] = 0 }
#endif
  /* the pod ends: it fails, or it goes with its deleted remote, or (waiting on a revoked
   * permit, where the model's agent says "no share, the pod ends") the worker deletes it
   * (admission.permit_clearing) */
  :: d_step { pod[w] != NOPOD ->
                printf("MSC: w%d's pod of A = %d ends\n", w, pA[w]);
                pod[w] = NOPOD; pA[w] = 0; fz[w] = 0 }
  od
}

init {
  atomic { run Time(); run Partition(); run Manager(); run Worker(0); run Worker(1) }
}
