/*
 * readmission.pml: the readmission protocol of dispatch-admission, for spin.
 * Explained in docs/readmission-model.md; checked by verify/run.py (make verify).
 *
 * Two controller replicas elect a leader on a Lease. The leader approves a Workload at the
 * readmission gate (admission/readmission.py) while Kueue, Trainer, JobSet, the Job
 * controller, the pod webhook and the kubelet do what they do, and the user holds and
 * releases the job. Every step below is one atomic request to the API server (or one
 * decision of a controller); between any two steps any other step may happen. That is how
 * a replica is slow or stalls: it takes no step for a while, its lease expires meanwhile,
 * and it carries on from where it was.
 *
 * An execution is one start of the job's pods: an unsuspend of the TrainJob, a JobSet made
 * while the TrainJob runs, or a JobSet restart. Its identity is (JobSet UID, A, J, attempt),
 * and its epoch (attempt - 1) * SPAN + A + J (SPAN is 10,000 in the code). A pod is alive
 * unless it Succeeded or Failed (a terminating pod is alive).
 *
 * Properties (assertions, at the step where each can first break):
 *   (a) never alive pods of two executions at once;
 *   (b) A rises exactly once per admission: never twice with one token, never twice for
 *       one (token, JobSet) by a rebind, and every execution started by the gate starts
 *       with its own admission's token recorded (an admission is one quota reservation of
 *       the Workload, named by the token <uid>/<evictions>);
 *   (c) each execution's epoch is strictly higher than the previous one's, across attempts
 *       too, and all pods of one execution have its identity;
 *   (d) the gate never waits on finished pods alone (they stay until their Job is deleted,
 *       so that wait would last for ever: checked here as a safety assertion);
 *   (e) never alive pods of two identities at once (what the pod fence itself promises;
 *       implied by (a) and (c), checked on its own where those do not hold).
 *
 * Paths, by preprocessor macro (spin -DNAME -a readmission.pml). With none of them the
 * model is the gate alone (one JobSet, one attempt, no rank finishes early, no pod fence):
 *   FINISH        a rank's pod may finish (Succeeded or Failed) while others run; its Job
 *                 keeps it, and does not run that index again on resume.
 *   JOBSETS       anyone may delete the JobSet; Trainer makes a new one at once (new UID,
 *                 J = 0; MAXRECREATE times, default 1); JobSet restarts raise J (MAXRESTART
 *                 times, default 1); the controller's rebind.
 *   ATTEMPTS=n    StopJob deletes the TrainJob, Workload and JobSet; a new attempt of the
 *                 same job starts from A = 0 (n attempts; default 1).
 *   REMAKE        Kueue re-makes the Workload once (new UID, not admitted).
 *   CHECKREMOVAL  an admin removes dispatch's check from the ClusterQueue: Kueue admits
 *                 without the gate.
 *   PODRACE       the webhook's judgement and the pod's creation may be two steps.
 *   JOBSETS, ATTEMPTS > 1, REMAKE, CHECKREMOVAL and PODRACE bring the pod fence (the
 *   webhook's checks) with them: those paths make pods that never pass the gate.
 * Rules of the protocol, and what removing one does (verify/run.py asserts each):
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
 *   FINISHEDBLOCK the gate counts finished pods as left. Must fail (d).
 *   NOPODFENCE    the webhook admits any pod. Must fail (a) or (e): a re-made JobSet runs
 *                 beside the old one's pods.
 *   NOJOBSETRECORD no approved JobSet on the TrainJob and no rebind; the webhook checks
 *                 only that no alive pod of another identity is left. Must fail (c).
 *   RAISEPASTJ    a raise that records a JobSet other than the approved one raises A by
 *                 1 + MAXRESTART (JobSet's failurePolicy.maxRestarts bounds J), not by 1.
 *                 Without it JOBSETS must fail (c): J = 0 of the new JobSet undoes the
 *                 old one's restarts.
 *   CACHEDJOBSET  the rebind reads the JobSet from its cache, not live. Must fail (b).
 *   RECORDNONE    the approval records "no JobSet" when its cache has none, and the webhook
 *                 skips the JobSet check when none is recorded. Must fail (c).
 *   NOWLCONFIRM   the raise without a live GET of the Workload before it (REMAKE,
 *                 ATTEMPTS). Must fail (b): a decision about a Workload that is gone raises
 *                 A, after the new one's raise or on the next attempt's TrainJob.
 *   NOATTEMPTBASE the epoch without the attempt's base. Must fail (c).
 * Bounds and switches:
 *   RVCOUNTER     resourceVersions as literal counters (the default stores only the result
 *                 of the one comparison ever made with them; same behaviours, more states).
 *   MAXHOLD=n     how many times the user holds (and may release) the job; default 2.
 *   NPOD=n        pods per execution; default 2.
 *   PROPS=n       which properties to check, a bit mask: 1 (a), 2 (b), 4 (c), 8 (d),
 *                 16 (e); default 31.
 * Crashes and stalls are unbounded. The printf lines tell a trail's story (spin -t).
 * TODO (not modelled, not implemented yet): a hold that outlives a re-made Workload; REMAKE
 * re-makes only an active Workload.
 */

#ifndef MAXHOLD
#define MAXHOLD 2
#endif
#ifndef PROPS
#define PROPS 31
#endif
#ifndef ATTEMPTS
#define ATTEMPTS 1
#endif
#ifdef JOBSETS
#ifndef MAXRECREATE
#define MAXRECREATE 1
#endif
#ifndef MAXRESTART
#define MAXRESTART 1
#endif
#else
#define MAXRECREATE 0
#define MAXRESTART 0
#endif
#ifdef REMAKE
#define MAXREMAKE 1
#else
#define MAXREMAKE 0
#endif
#if (defined(JOBSETS) || ATTEMPTS > 1 || defined(REMAKE) || defined(CHECKREMOVAL) || defined(PODRACE)) && !defined(NOPODFENCE)
#define PODFENCE
#endif
#ifndef NPOD
#define NPOD 2            /* pods per execution: a two-node TrainJob */
#endif
#define NONE 2            /* no replica */
#define NOJS 15           /* no JobSet UID */
#define SPAN 16           /* epochs per attempt (10,000 in the code); A + J stays below */
#define NOJSMSG 100       /* the check's message "waiting for Trainer to make JobSet ..." */

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
byte wuid = 0;            /* metadata.uid: a re-made Workload (REMAKE, a new attempt) */
bool checkon = true;      /* the ClusterQueue lists dispatch's check (CHECKREMOVAL) */
bool gated = true;        /* the current admission was admitted with the check listed */

/* --- the TrainJob -------------------------------------------------------------------- */
bool suspended = true;    /* spec.suspend */
byte A = 0;               /* annotation admission-count */
byte tok = 0;             /* annotation admission-token: ev+1 of the admission that raised
                             A last, and tokw the uid of its Workload; 0: none */
byte tokw = 0;
byte appr = NOJS;         /* annotation approved-jobset: the UID the last raise recorded */
byte att = 1;             /* the attempt this TrainJob is (its label; the service counts) */

/* --- the JobSet ---------------------------------------------------------------------- */
byte js = 0;              /* metadata.uid of the TrainJob's JobSet */
byte J = 0;               /* status.restarts: pods of restart J carry restart-attempt = J */
byte ndel = 0, nrst = 0, nremake = 0;

/* --- resourceVersions ----------------------------------------------------------------
 * A write's precondition compares the version a replica read with the current one, and
 * every write makes a new version. So "rv read == rv now" holds exactly when nothing wrote
 * the object since the read: by default the model keeps that truth per replica and object,
 * RVCOUNTER keeps the numbers themselves (bounded here by 250 writes). A deleted and
 * re-made object (StopJob, REMAKE) has a new version too. */
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
 * that was current at some moment in the past. The decision reads the Workload, the
 * TrainJob and the JobSet from there.
 * - The Workload is the decision's first read: a version that was current at some
 *   earlier moment, read from the cache now, is to everything after it the same as a
 *   GET at that moment followed by a stall until now. READ_WL is that GET; the stall is
 *   any interleaving.
 * - The TrainJob is read after the pods are listed, but its cached version may be older
 *   than the list and than the Workload's version. READ_TJ reads either the current
 *   version or an older one: being older, it fails the rv precondition of RAISE, and its
 *   token is one the TrainJob had, so not higher than the current one (RAISE only ever
 *   writes a higher token of a Workload, under the TrainJob's rv). Any such token may be
 *   read. That is more than a cache can hold (a cache is per replica and moves forward),
 *   which is safe: a property that holds with more behaviours holds with fewer.
 * - The JobSet's UID (JOBSETS), for the approval to record: the current one, none (after
 *   a deletion), or an older one (any older UID is, to the model, as good as the one
 *   before the current). The rebind reads it live (CACHEDJOBSET: from the cache too).
 * CACHEDPODS: a cache of the pod count too, exact (the last count it took), so that a
 * counterexample found with it is one a real cache can produce. */
#ifdef CACHEDPODS
byte c_npods[2];
#endif

/* --- pods, and the bookkeeping of the properties -------------------------------------
 * In a state the search reaches, all alive pods have one identity (else (e) failed when
 * the second one was made), so the model keeps their count and that one identity. */
byte nrun = 0;            /* alive pods (FINISH: running ones, of the current Jobs) */
#ifdef FINISH
byte nterm = 0;           /* terminating pods: alive until gone */
byte nfin = 0;            /* finished pods of the current Jobs: kept until they go */
#define NALIVE     (nrun + nterm)
#define STOP_PODS  nterm = nterm + nrun; nrun = 0     /* the Jobs stop: pods terminate */
#define DROP_FIN   nfin = 0                           /* the Jobs are deleted */
#define RESUMED    nfin                               /* finished ranks do not run again */
#else
#define NALIVE     nrun
#define STOP_PODS  skip
#define DROP_FIN   skip
#define RESUMED    0
#endif
byte al_js = 0, al_A = 0, al_J = 0, al_att = 1;   /* the alive pods' identity */
bool al_cur = false;      /* the alive pods belong to the current execution */
byte ncreated = 0;        /* ranks of the current execution that have (had) a pod */
bool rfirst = true;       /* the current execution has had no pod yet */
byte lastE = 0;           /* epoch of the latest execution that had a pod */
byte r_js = 0, r_A = 0, r_J = 0;  /* the current execution's identity, once it had a
                                     pod (its attempt is the current one) */
bool own_token = false;   /* at the latest unsuspend, the recorded token was the admission's
                             (or the admission did not pass the gate) */
byte holds = 0;

#define NW       (ATTEMPTS + MAXREMAKE)           /* Workload UIDs */
#define NJS      (ATTEMPTS + MAXRECREATE)         /* JobSet UIDs */
#define TOKIX(w, e) ((w) * (MAXHOLD + 2) + (e))
bit raised[NW * (MAXHOLD + 2)];   /* token t raised A (this TrainJob) */
#if defined(JOBSETS) && !defined(NOJOBSETRECORD)
bit rebound[NW * (MAXHOLD + 2) * NJS];   /* a rebind raised A for (token, JobSet) */
#endif

#ifdef NOATTEMPTBASE
#define EPOCH(at, a, j) ((a) + (j))
#else
#define EPOCH(at, a, j) (((at) - 1) * SPAN + (a) + (j))
#endif

/* How much a raise that names JobSet u adds to A. RAISEPASTJ: past any J the approved
 * JobSet can have reached (JobSet's failurePolicy.maxRestarts), when u is another. */
#ifdef RAISEPASTJ
#define STEP(u)   (1 + ((appr != NOJS && appr != (u)) -> MAXRESTART : 0))
#else
#define STEP(u)   1
#endif

/* --- the pod webhook (admission/pod_identity.py, core/execution.judge_pod) ------------
 * Served by every replica. It reads the TrainJob and the job's pods live when a pod is
 * created and admits a dispatch pod only if (1) A > 0 and its JobSet is the approved one
 * (when one is recorded) and (2) no alive pod of the job belongs to another identity
 * (3) and A + J < SPAN. Otherwise it refuses; the Job controller tries again later. */
#define SAME_ALIVE (al_js == js && al_A == A && al_J == J && al_att == att)
#ifdef PODFENCE
#ifdef NOJOBSETRECORD
#define FENCE1     (A > 0)
#else
#define FENCE1     (A > 0 && (appr == NOJS || appr == js))
#endif
#define POD_OK     (FENCE1 && (NALIVE == 0 || SAME_ALIVE) && A + J < SPAN)
#else
#define POD_OK     true
#endif
/* PODRACE: the webhook's judgement and the pod's creation may also be two steps, for one
 * pod at a time; by default they are one, as if the webhook's reads and the write were. */
#ifdef PODRACE
bool inflight = false;
byte if_js, if_A, if_J, if_att;
#endif
/* JobSet's restart is blocking: the Jobs of restart J make pods once no pod of the
 * JobSet's earlier Jobs is alive. */
#define JS_READY   !(NALIVE > 0 && al_js == js && al_J != J)
/* no pod can be made until the next NEW_EXEC: forget this execution (fewer states) */
#define HALT       ncreated = 0; rfirst = true; al_cur = false; r_js = 0; r_A = 0; r_J = 0
/* the Jobs of the current JobSet start over: a new execution */
#define NEW_EXEC   HALT
/* the last alive pod went: forget what the alive pods were (fewer states, same behaviours) */
#define GONE       if \
                   :: NALIVE == 0 -> al_cur = false; al_js = 0; al_A = 0; al_J = 0; al_att = 1 \
                   :: else -> skip \
                   fi

/* --- one replica: its leader elector and its decision (Readmission._act) ------------- */
#define IDLE      0       /* waiting for an event */
#define READ_WL   1       /* reconcile() saw it lead: the Workload from the cache, decide() */
#define LIST      2       /* list the job's pods, live, terminating ones included */
#define WAIT      3       /* pods left: apply the check Pending, "waiting for N pods" */
#define READ_TJ   4       /* none left: the TrainJob from the cache, plan_admission() */
#define CONFIRM1  5       /* is_leader() before raising A (LEASECONFIRM: and GET the Lease) */
#define RAISE     6       /* merge patch A+1, the token and the JobSet, TrainJob rv fence */
#define CONFIRM2  7       /* is_leader() before approving (LEASECONFIRM: and GET the Lease) */
#define APPROVE   8       /* apply the check Ready, fenced by the Workload rv read */
#define RB_LIST   9       /* rebind: list the job's pods, live */
#define RB_READ   10      /* rebind: GET the JobSet live; the TrainJob from the cache */
#define RB_RAISE  11      /* rebind: is_leader(), merge patch A+1 and the JobSet, rv fence */
#define WLCHECK   12      /* GET the Workload live: still the one read? */

/* the pods the decision counts: live, alive ones (CACHEDPODS: from the cache;
 * FINISHEDBLOCK: finished ones too) */
#ifdef CACHEDPODS
#define PODS_LISTED c_npods[me]
#elif defined(FINISHEDBLOCK)
#define PODS_LISTED (NALIVE + nfin)
#else
#define PODS_LISTED NALIVE
#endif

/* decide(): the check is Pending, the Workload active, its quota reserved and (the
 * eviction guard) not Evicted, for a reservation Kueue is tearing down is no admission;
 * and the ClusterQueue lists the check. */
#ifdef NOEVICTGUARD
#define OURS      (!ready && wl_active && quota && checkon)
#else
#define OURS      (!ready && wl_active && quota && !evicted && checkon)
#endif
/* decide()'s rebind case: the check Ready, admitted, active, not Evicted, and the JobSet
 * not the approved one (judged again at RB_READ, with the token). decide() sees that
 * mismatch in its caches; a decision begun before the mismatch arose is, to every later
 * step, the same as one begun right after it (READ_WL touches nothing the re-making of a
 * JobSet does), and one that sees a mismatch no longer there goes no further than RB_READ,
 * so the model starts one only on a current mismatch: fewer states, same behaviours. */
#define REBIND    (ready && admitted && wl_active && !evicted && checkon && appr != NOJS \
                   && appr != js)

/* the token rule of plan_admission(): tokens of one Workload are ordered by evictions */
#define TOK_THIS  (tok == ev_r + 1 && tokw == wuid_r)

#define TOK_NEWER (tok > ev_r + 1 && tokw == wuid_r)
#ifdef TOKENEQ
#define RAISES    (!TOK_THIS)
#else
#define RAISES    (!TOK_THIS && !TOK_NEWER)
#endif

/* the decision is over, or lost with the process: forget what it read */
#define FORGET    pc = IDLE; ev_r = 0; msg_r = 0; pods_r = 0; wuid_r = 0; js_r = 0; \
                  pjs_r = 0; FORGET_RV

/* on to approve: what the decision read is needed no more, but the Workload's rv */
#define TO_APPROVE pc = CONFIRM2; ev_r = 0; wuid_r = 0; js_r = 0

/* on to raise A, recording the current JobSet (after a live GET of the Workload, where
 * it can be re-made: REMAKE, ATTEMPTS) */
#if (defined(REMAKE) || ATTEMPTS > 1) && !defined(NOWLCONFIRM)
#define TO_RAISE  js_r = js; pc = WLCHECK
#else
#define TO_RAISE  js_r = js; pc = CONFIRM1
#endif

/* plan_rebind(), from the TrainJob in the cache (an older version fails RB_RAISE's fence):
 * the token is this admission's, the JobSet is not the approved one, and no alive pod of
 * another JobSet was listed */
#define RB_JUDGE  TJ_READ; \
                  if \
                  :: TOK_THIS && appr != NOJS && appr != js_r && (pjs_r == NOJS || pjs_r == js_r) -> \
                       pc = RB_RAISE; ev_r = 0; wuid_r = 0; pjs_r = 0 \
                  :: else -> FORGET \
                  fi

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
  byte ev_r, msg_r, pods_r, wuid_r, js_r, pjs_r;   /* what this decision read */

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
  :: d_step { c_npods[me] = NALIVE }
#endif

  /* One decision. */
  :: d_step { pc == IDLE && MAYDECIDE -> pc = READ_WL }
  :: d_step { pc == READ_WL ->
                if
                :: OURS -> WL_READ; ev_r = ev; msg_r = msg; wuid_r = wuid; pc = LIST;
                     printf("MSC: r%d reads the Workload from its cache: check Pending, quota reserved, %d evictions\n", me, ev)
#if defined(JOBSETS) && !defined(NOJOBSETRECORD)
                :: REBIND -> ev_r = ev; wuid_r = wuid; pc = RB_LIST;
                     printf("MSC: r%d reads the Workload from its cache: check Ready, admitted\n", me)
#endif
                :: else -> FORGET                                   /* idle */
                fi }
  :: d_step { pc == LIST ->
                pods_r = PODS_LISTED;
#if (PROPS & 8) && !defined(CACHEDPODS)
                assert(pods_r == 0 || NALIVE > 0);  /* (d) never waits on finished pods alone */
#endif
                if
                :: pods_r > 0 && msg_r != pods_r -> pc = WAIT;
                     printf("MSC: r%d lists %d pods\n", me, pods_r)
                :: pods_r > 0 && msg_r == pods_r -> FORGET          /* said so already */
                :: pods_r == 0 -> pc = READ_TJ; printf("MSC: r%d lists no pod\n", me)
                fi;
                msg_r = 0 }
#ifdef JOBSETS
  /* ...and no pod left, but the cache has no JobSet (it brought the deletion of one and
   * not yet its successor): wait for Trainer to make it */
  :: d_step { pc == LIST && PODS_LISTED == 0 && ndel > 0 ->
                if
                :: msg_r != NOJSMSG -> pods_r = NOJSMSG; pc = WAIT;
                     printf("MSC: r%d lists no pod, and finds no JobSet in its cache\n", me)
                :: else -> FORGET
                fi;
                msg_r = 0 }
#endif
  /* Not fenced, and not confirmed (reconcile() asked whether it leads, long ago). */
  :: d_step { pc == WAIT ->
                ready = false; msg = pods_r; WL_WRITE;
                printf("MSC: r%d writes the check Pending: waiting for %d pods\n", me, pods_r);
                FORGET }
  /* The TrainJob from the cache, the current version: plan_admission() */
  :: d_step { pc == READ_TJ ->
                TJ_READ;
                if
                :: TOK_THIS -> TO_APPROVE;       /* this admission raised A already */
                     printf("MSC: r%d reads the TrainJob from its cache: A = %d, raised for this admission\n", me, A)
#ifdef TOKENEQ
                :: else -> TO_RAISE;
                     printf("MSC: r%d reads the TrainJob from its cache: A = %d, token of another admission\n", me, A)
#else
                :: TOK_NEWER -> FORGET;          /* a newer one did: our read is old */
                     printf("MSC: r%d reads the TrainJob from its cache: raised for a newer admission\n", me)
                :: else -> TO_RAISE;             /* none, an older admission, another Workload */
                     printf("MSC: r%d reads the TrainJob from its cache: A = %d, not raised for this admission\n", me, A)
#endif
                fi }
  /* ...or an older version, which fails the rv precondition of RAISE. Its token is one the
   * TrainJob had: this admission's if that was ever recorded, else another (a newer one's
   * would end the decision, as above). */
  :: d_step { pc == READ_TJ && raised[TOKIX(wuid_r, ev_r + 1)] ->
                TJ_OLDER; TO_APPROVE;
                printf("MSC: r%d reads an older TrainJob from its cache: raised for this admission\n", me) }
  :: d_step { pc == READ_TJ -> TJ_OLDER; pc = CONFIRM1;
                printf("MSC: r%d reads an older TrainJob from its cache: not raised for this admission\n", me) }
#if (defined(REMAKE) || ATTEMPTS > 1) && !defined(NOWLCONFIRM)
  /* Before raising, GET the Workload live: go on only if it is still the one read (its
   * UID). The TrainJob was read before, and the raise is fenced by its rv: a Workload made
   * since can only have raised A after that read, which fails the raise. */
  :: d_step { pc == WLCHECK ->
                if
                :: wuid == wuid_r -> pc = CONFIRM1
                :: else -> FORGET; printf("MSC: r%d GETs the Workload: it is another one now; gives up\n", me)
                fi }
#endif
#ifdef JOBSETS
  /* The JobSet the raise will record (core.execution.approval_annotations) comes from the
   * cache at the same moment as the TrainJob (no request in between): above, the current
   * one; here an older one, or none (after a deletion, before its successor): then wait. */
  :: d_step { pc == READ_TJ && RAISES && js > 0 -> TJ_READ; TO_RAISE; js_r = js - 1;
                printf("MSC: r%d reads the TrainJob from its cache: A = %d, not raised for this admission; and an older JobSet %d\n", me, A, js_r) }
#ifdef RECORDNONE
  :: d_step { pc == READ_TJ && RAISES && ndel > 0 -> TJ_READ; TO_RAISE; js_r = NOJS;
                printf("MSC: r%d reads the TrainJob from its cache: A = %d, not raised for this admission; and no JobSet: the raise will record none\n", me, A) }
#else
  :: d_step { pc == READ_TJ && RAISES && ndel > 0 -> FORGET;
                printf("MSC: r%d finds no JobSet in its cache: waits\n", me) }
#endif
#endif
  :: d_step { pc == CONFIRM1 ->
                if
                :: CONFIRMED -> pc = RAISE; printf("MSC: r%d leads, by its own state\n", me)
                :: else -> FORGET
                fi }
  :: d_step { pc == RAISE ->
                if
                :: TJ_SAME ->
#if (PROPS & 2)
                     assert(raised[TOKIX(wuid_r, ev_r + 1)] == 0);   /* (b) once a token */
#endif
                     raised[TOKIX(wuid_r, ev_r + 1)] = 1;
                     A = A + STEP(js_r); tok = ev_r + 1; tokw = wuid_r;
#ifndef NOJOBSETRECORD
                     appr = js_r;
#endif
                     TJ_WRITE;
                     printf("MSC: r%d raises A to %d, token of admission %d of Workload %d, JobSet %d\n", me, A, ev_r, wuid_r, js_r);
                     TO_APPROVE
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

#if defined(JOBSETS) && !defined(NOJOBSETRECORD)
  /* The rebind (Readmission._rebind, core.execution.plan_rebind): the Workload's admission
   * is the one the token records, and the TrainJob's JobSet is not the approved one. Once
   * no alive pod of another JobSet is left, raise A and record the JobSet, in one merge
   * patch fenced by the TrainJob's rv. The pods are listed first (with the decision). */
  :: d_step { pc == RB_LIST -> pjs_r = (NALIVE > 0 -> al_js : NOJS); pc = RB_READ }
  /* the JobSet live (Trainer re-makes a deleted one at once: there is one) */
  :: d_step { pc == RB_READ -> js_r = js; RB_JUDGE }
#ifdef CACHEDJOBSET
  :: d_step { pc == RB_READ && js > 0 -> js_r = js - 1; RB_JUDGE;
                printf("MSC: r%d reads an older JobSet %d from its cache\n", me, js_r) }
#endif
  :: d_step { pc == RB_RAISE ->
                if
                :: CONFIRMED && TJ_SAME ->
#if (PROPS & 2)
                     assert(rebound[TOKIX(tokw, tok) * NJS + js_r] == 0);  /* (b) once a JobSet */
#endif
                     rebound[TOKIX(tokw, tok) * NJS + js_r] = 1;
                     A = A + STEP(js_r); appr = js_r; TJ_WRITE;
                     printf("MSC: r%d rebinds: A to %d for JobSet %d\n", me, A, js_r)
                :: else -> skip                                     /* not leading, 409 */
                fi;
                FORGET }
#endif

  /* A crash, at any step: the process restarts with its local state lost and the same
   * identity (its pod's name), so it may renew its own lease at once. */
  :: d_step { pc != IDLE || leading[me] -> leading[me] = false; FORGET;
                printf("MSC: r%d crashes and restarts\n", me) }
  od
}

/* --- Kueue, Trainer, JobSet, Job, the webhook, the kubelet, the user, and time ------- */
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
  /* Kueue's job reconciler stops a running job whose Workload is not admitted (Trainer
   * suspends the JobSet, and its Jobs: their pods terminate, slowly)... */
  :: d_step { !suspended && !admitted -> suspended = true; TJ_WRITE; STOP_PODS; HALT; own_token = false;
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
  /* Kueue admits an active Workload with quota reserved and every check Ready (with no
   * check listed, at once). (Kueue evicts a deactivated Workload first, and writes its
   * status with the resourceVersion it read, so it never admits one whose hold it has not
   * seen. Dropping wl_active here adds no reachable state.) */
  :: d_step { wl_active && quota && (ready || !checkon) && !admitted && !evicted ->
                admitted = true; gated = checkon; WL_WRITE;
                printf("MSC: Kueue admits the Workload\n") }
  /* Kueue's job reconciler starts the job of an admitted Workload: a new execution */
  :: d_step { admitted && suspended ->
                own_token = (!gated || (tok == ev + 1 && tokw == wuid));
                suspended = false; TJ_WRITE; NEW_EXEC; ncreated = RESUMED;
                printf("MSC: Kueue unsuspends the TrainJob: a new execution\n") }

  /* The Job controller creates a pod of the running job (for a rank that has none and has
   * not finished); the webhook judges it (PODFENCE), reading the TrainJob and the pods
   * live, and gives it A from the TrainJob, J from its JobSet restart. */
  :: d_step { !suspended && ncreated < NPOD && JS_READY && POD_OK ->
                printf("MSC: a pod starts: JobSet %d, A = %d, J = %d, attempt %d, epoch %d (%d pods exist)\n",
                       js, A, J, att, EPOCH(att, A, J), NALIVE);
#if (PROPS & 1)
                assert(NALIVE == 0 || al_cur);                         /* (a) */
#endif
                if
                :: rfirst ->
#if (PROPS & 4)
                     assert(EPOCH(att, A, J) > lastE);                 /* (c) epoch rises */
#endif
#if (PROPS & 2)
                     assert(own_token);                                /* (b) raised for it */
#endif
                     lastE = EPOCH(att, A, J); r_js = js; r_A = A; r_J = J; rfirst = false
                :: else ->
#if (PROPS & 4)
                     assert(r_js == js && r_A == A && r_J == J)        /* (c) one each */
#else
                     skip
#endif
                fi;
#if (PROPS & 16)
                assert(NALIVE == 0 || SAME_ALIVE);                     /* (e) */
#endif
                nrun++; ncreated++; al_cur = true;
                al_js = js; al_A = A; al_J = J; al_att = att }
#ifdef PODRACE
  /* ...or the webhook admits it, and the API server stores it later: the webhook's reads
   * are not the write (one such pod at a time) */
  :: d_step { !suspended && ncreated < NPOD && JS_READY && POD_OK && !inflight ->
                printf("MSC: the webhook admits a pod: JobSet %d, A = %d, J = %d, attempt %d, epoch %d (%d pods exist); not stored yet\n",
                       js, A, J, att, EPOCH(att, A, J), NALIVE);
                if
                :: rfirst ->
#if (PROPS & 4)
                     assert(EPOCH(att, A, J) > lastE);                 /* (c) epoch rises */
#endif
#if (PROPS & 2)
                     assert(own_token);                                /* (b) raised for it */
#endif
                     lastE = EPOCH(att, A, J); r_js = js; r_A = A; r_J = J; rfirst = false
                :: else ->
#if (PROPS & 4)
                     assert(r_js == js && r_A == A && r_J == J)        /* (c) one each */
#else
                     skip
#endif
                fi;
                inflight = true; if_js = js; if_A = A; if_J = J; if_att = att; ncreated++ }
  :: d_step { inflight ->
                printf("MSC: the API server stores the pod admitted earlier: JobSet %d, A = %d, J = %d (%d pods exist)\n",
                       if_js, if_A, if_J, NALIVE);
#if (PROPS & 16)
                assert(NALIVE == 0 || (al_js == if_js && al_A == if_A && al_J == if_J && al_att == if_att)); /* (e) */
#endif
                nrun++; al_cur = true; inflight = false;
                al_js = if_js; al_A = if_A; al_J = if_J; al_att = if_att;
                if_js = 0; if_A = 0; if_J = 0; if_att = 0 }
#endif
#ifdef FINISH
  /* the kubelet: a terminating pod is gone, after any delay */
  :: d_step { nterm > 0 -> nterm--; GONE; printf("MSC: a terminating pod is gone (%d alive left)\n", NALIVE) }
  /* a running rank finishes (Succeeded, or Failed): not alive; its Job keeps the pod */
  :: d_step { nrun > 0 -> nrun--; nfin++; GONE;
                printf("MSC: a rank finishes: its pod Succeeded and stays (%d alive left)\n", NALIVE) }
#else
  /* the kubelet: a pod ends, after any delay: a stopped job's pod may linger, and a
   * running job's pod may end too (it fails or succeeds, and its rank is not run again
   * in this execution) */
  :: d_step { nrun > 0 -> nrun--; GONE; printf("MSC: a pod is gone (%d left)\n", nrun) }
#endif

#ifdef JOBSETS
  /* Anyone deletes the JobSet (kubectl delete jobset): its Jobs go, their pods terminate;
   * Trainer makes it again at once, with a new UID and J = 0, running if the TrainJob is
   * (Kueue keeps the Workload admitted). A cache may show no JobSet in between. */
  :: d_step { ndel < MAXRECREATE -> ndel++; STOP_PODS; DROP_FIN; HALT;
                js++; J = 0; NEW_EXEC;
                printf("MSC: someone deletes JobSet %d: its pods terminate; Trainer makes JobSet %d: a new execution\n", js - 1, js) }
  /* JobSet restarts the running JobSet (a pod failed): J + 1, new Jobs */
  :: d_step { !suspended && nrst < MAXRESTART -> J++; nrst++; STOP_PODS; DROP_FIN;
                NEW_EXEC; printf("MSC: JobSet %d restarts: J = %d, a new execution\n", js, J) }
#endif
#ifdef REMAKE
  /* Kueue finds the (active) Workload no longer matches the job, or gone: it suspends the
   * job if it runs, deletes the Workload and makes a new one: a new UID, no quota, not
   * admitted (jobframework's ensureOneWorkload suspends a running job first; the model
   * does it all in one step) */
  :: d_step { wl_active && nremake < MAXREMAKE ->
                if
                :: !suspended -> suspended = true; TJ_WRITE; STOP_PODS; HALT; own_token = false
                :: else -> skip
                fi;
                nremake++; wuid++; quota = false; evicted = false; admitted = false;
                ready = false; msg = 0; ev = 0; WL_WRITE;
                printf("MSC: Kueue re-makes the Workload (suspending the job): Workload %d\n", wuid) }
#endif
#ifdef CHECKREMOVAL
  /* An admin removes dispatch's check from the ClusterQueue: Kueue drops it from the
   * Workload, and admits without it */
  :: d_step { checkon -> checkon = false; ready = false; msg = 0; WL_WRITE;
                printf("MSC: an admin removes dispatch's check from the ClusterQueue\n") }
#endif
#if ATTEMPTS > 1
  /* StopJob deletes the TrainJob with its Workload and JobSet (the pods terminate), and
   * the service starts the next attempt: a TrainJob of the same name, A = 0 */
  :: d_step { att < ATTEMPTS ->
                att++; STOP_PODS; DROP_FIN;
                suspended = true; A = 0; tok = 0; tokw = 0; appr = NOJS; own_token = false;
                TJ_WRITE;
                wuid++; wl_active = true; quota = false; evicted = false; admitted = false;
                ready = false; msg = 0; ev = 0; WL_WRITE;
                js++; J = 0; NEW_EXEC;
                printf("MSC: StopJob, and attempt %d starts: TrainJob, Workload %d, JobSet %d\n", att, wuid, js) }
#endif

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
