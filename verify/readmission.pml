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
 *       implied by (a) and (c), checked on its own where those do not hold);
 *   (f) a hold is never lost: from the end of the user's hold (both its writes) to the
 *       start of its release, no Workload of the job is approved (its check written Ready)
 *       or admitted by Kueue, a re-made one included: nothing new runs until the release
 *       (an execution admitted before the hold may still start, until Kueue evicts);
 *   (g) a release is never lost: once the user's release is over (both its writes), no
 *       Workload carries that hold's record: the controller's hold copy never lands for a
 *       released hold, and never lands unseen by the release;
 *   (h) a held job runs nothing: once the hold's writes are done and the TrainJob is
 *       suspended (what Inspect reports as held), no pod starts until the release.
 *
 * Holds (dispatch_kubeflow.hold). A hold is recorded on the TrainJob first (annotations,
 * merge patch, TrainJob rv fence), then on the Workload with spec.active=false (Workload rv
 * fence); a release removes the TrainJob's record first (JSON patch testing the hold
 * instance), then reactivates the Workload and removes its record. The leader approves no
 * Workload whose TrainJob, as it read it, carries a record (and the raise of A is fenced
 * by the TrainJob's rv, so a record written after the read fails the raise), and copies
 * the hold: a Workload that carries no record, of a TrainJob that does (read live after
 * the Workload), gets the record and spec.active=false, fenced by the rv of the Workload
 * it judged from. So a hold outlives a re-made Workload (REMAKE).
 *
 * Paths, by preprocessor macro (spin -DNAME -a readmission.pml). With none of them the
 * model is the gate alone (one JobSet, one attempt, no rank finishes early, no pod fence):
 *   FINISH        a rank's pod may finish (Succeeded or Failed) while others run; its Job
 *                 keeps it, and does not run that index again on resume.
 *   JOBSETS       anyone may delete the JobSet; Trainer makes a new one at once (new UID,
 *                 J = 0; MAXRECREATE times, default 1); JobSet restarts raise J (MAXRESTART
 *                 times, default 1); the controller's rebind.
 *   ATTEMPTS=n    StopJob deletes the TrainJob, Workload and JobSet; a new attempt of the
 *                 same job starts from A = 0 (n attempts; default 1). A hold ends with its
 *                 attempt.
 *   REMAKE        Kueue (or anyone) deletes the Workload, at any moment, held or not, and
 *                 Kueue makes a new one (new UID, active, no hold record, not admitted);
 *                 MAXREMAKE times, default 1.
 *   CHECKREMOVAL  an admin removes dispatch's check from the ClusterQueue: Kueue admits
 *                 without the gate.
 *   PODRACE       the webhook's judgement and the pod's creation may be two steps.
 *   GATES         (with PODRACE) the webhook gates every pod it admits: stored, a pod is
 *                 alive but does not run until its gate is lifted, and the webhook judges
 *                 the lift against the pods stored then (core.scheduling_gate).
 *   STALERUNTIME  (with ATTEMPTS > 1) Trainer may build the next attempt's JobSet from the
 *                 runtime copy of the attempt before, still in its cache (same name, the
 *                 copy StopJob deleted): its pods carry the old attempt's labels.
 *   JOBLAG        Kueue's suspend of the TrainJob reaches its Jobs later (Trainer suspends
 *                 the JobSet, JobSet its Jobs): until then they still make pods.
 *   JOBSETS, ATTEMPTS > 1, REMAKE, CHECKREMOVAL, PODRACE and JOBLAG bring the pod fence
 *   (the webhook's checks) with them: those paths make pods that never pass the gate.
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
 *   NOPODTOKEN    the webhook does not compare the Workload's admission with the token
 *                 recorded with A. With CHECKREMOVAL must fail (a): a readmission without
 *                 the check reruns the last identity.
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
 *   EARLYTJ       the approval's reads in the other order (issue 28, decision latency):
 *                 the TrainJob (and its JobSet) from the cache first, then the live list
 *                 of the pods and the live GET of the Workload, sent side by side. With
 *                 GETFIRST the GET lands before the list, without it after: both must
 *                 verify, so any order the two concurrent requests take is safe.
 *   NOHOLDRECORD  the hold lives on the Workload only: no record on the TrainJob, no copy.
 *                 Must fail (f) with REMAKE: the re-made Workload of a held job is approved.
 *   CACHEDHOLDCOPY the hold copy judges the TrainJob from its cache, not from a live GET.
 *                 Must fail (g): a cache that has not seen the release brings it back.
 *   NORELEASEWRITE the release does not write a Workload that carries no record (a
 *                 re-made one not yet copied to): a patch that changes nothing makes no
 *                 new rv. Must fail (g) with REMAKE: a copy that read the TrainJob before
 *                 the release lands after it. So the release writes the Workload always
 *                 (an annotation naming the released hold, say).
 *   RELEASEWLFIRST the release reactivates the Workload first, then removes the TrainJob's
 *                 record. Must fail (g): the copy holds the job again in between.
 *   NOATTEMPTLABEL the webhook does not compare the pod's attempt label with the TrainJob's
 *                 and takes the epoch's attempt from the pod. With STALERUNTIME must
 *                 fail (c): attempt 2 runs at attempt 1's base, below its last epoch.
 *   NOSTARTA      (GATES) the lift does not check that the pod is of the current execution
 *                 (the A the webhook gave it is the job's). Must fail (c): a pod admitted
 *                 before a readmission starts after it, at the old identity.
 *   NOSUSPENDFENCE the webhook admits pods of a held or suspended TrainJob. With JOBLAG it
 *                 still verifies (h) in Kueue mode, where the token rule refuses the same
 *                 pods (the eviction or the re-made Workload changed the admission); with
 *                 NOPODTOKEN too it must fail (h): a lagging Job starts a rank of the held job.
 * Bounds and switches:
 *   RVCOUNTER     resourceVersions as literal counters (the default stores only the result
 *                 of the one comparison ever made with them; same behaviours, more states).
 *   MAXHOLD=n     how many times the user holds (and may release) the job; default 2.
 *   NPOD=n        pods per execution; default 2.
 *   PROPS=n       which properties to check, a bit mask: 1 (a), 2 (b), 4 (c), 8 (d),
 *                 16 (e), 32 (f), 64 (g), 128 (h); default 255.
 * Crashes and stalls are unbounded. The printf lines tell a trail's story (spin -t).
 */

#ifndef MAXHOLD
#define MAXHOLD 2
#endif
#ifndef PROPS
#define PROPS 255
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
#ifndef MAXREMAKE
#define MAXREMAKE 1
#endif
#else
#define MAXREMAKE 0
#endif
#if (defined(JOBSETS) || ATTEMPTS > 1 || defined(REMAKE) || defined(CHECKREMOVAL) || defined(PODRACE) || defined(JOBLAG)) && !defined(NOPODFENCE)
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
byte wl_hold = 0;         /* the hold record in its annotations: the hold's instance; 0: none.
                             A Workload is deactivated with its hold record, always, and
                             reactivated with its removal: spec.active is wl_hold == 0 */
#define wl_active (wl_hold == 0)
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
#ifdef NOHOLDRECORD
#define TJHOLD    false
#else
bool tj_hold = false;     /* annotations hold-*: the record of the user's hold, instance
                             `holds` (the user's holds are one after another) */
#define TJHOLD    tj_hold
#endif

/* --- the JobSet ---------------------------------------------------------------------- */
byte js = 0;              /* metadata.uid of the TrainJob's JobSet */
byte js_att = 1;          /* the attempt label of its pods: from the runtime copy Trainer
                             built it from (STALERUNTIME: may be the attempt before's) */
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
byte holds = 0;           /* the user's holds so far: the instance of the latest one */
byte uphase = 0;          /* where the user is in its hold and release: */
#define U_FREE      0     /* not holding (never, or released: both writes done) */
#define U_HOLDING   1     /* the hold's first write done: the record on the TrainJob */
#define U_HELD      2     /* the hold's writes done, the release not begun */
#define U_RELEASING 3     /* the release's first write done */
/* hold k is released: the user released it (both writes), or a later one began */
#define RELEASED(k) ((k) < holds || uphase == U_FREE)
/* The release's write on the Workload: reactivate it and remove the record, if it carries
 * this hold's; and a write even when it carries none (a re-made Workload), say an
 * annotation naming the released hold, so that the rv of every version read before moves
 * on: a hold copy judged from one gets 409. NORELEASEWRITE: no write then, as a patch that
 * changes nothing is no write to the API server (no new rv). */
#ifdef NORELEASEWRITE
#define RELEASE_WL  if \
                    :: wl_hold == holds -> wl_hold = 0; WL_WRITE \
                    :: else -> skip \
                    fi
#else
#define RELEASE_WL  if \
                    :: wl_hold == holds -> wl_hold = 0 \
                    :: else -> skip \
                    fi; \
                    WL_WRITE
#endif

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
 * (3) and A + J < SPAN (4) and the Workload's current admission is the one approved.
 * Otherwise it refuses; the Job controller tries again later. */
#define SAME_ALIVE (al_js == js && al_A == A && al_J == J && al_att == js_att)
#ifdef PODFENCE
#ifdef NOJOBSETRECORD
#define FENCE1     (A > 0)
#else
#define FENCE1     (A > 0 && (appr == NOJS || appr == js))
#endif
/* (4) the Workload's current admission is the one whose token was recorded with A
 * (core.admission_count.unapproved_admission): an admission Kueue made without the check
 * (CHECKREMOVAL), after an eviction or on a re-made Workload, runs no pod. */
#ifdef NOPODTOKEN
#define FENCE4     true
#else
#define FENCE4     (tok == ev + 1 && tokw == wuid)
#endif
/* (5) the TrainJob is neither held nor suspended (a Job that has not yet seen the suspend
 * makes no pod of a held job) */
#ifdef NOSUSPENDFENCE
#define FENCE5     true
#else
#define FENCE5     (!suspended && !TJHOLD)
#endif
/* (6) the pod's attempt label is the TrainJob's (a JobSet built from a stale runtime copy
 * makes pods labelled with the attempt before); NOATTEMPTLABEL: the epoch is taken from
 * the pod's label unchecked */
#ifdef NOATTEMPTLABEL
#define FENCE6     true
#else
#define FENCE6     (js_att == att)
#endif
#define POD_OK     (FENCE1 && FENCE4 && FENCE5 && FENCE6 && (NALIVE == 0 || SAME_ALIVE) && A + J < SPAN && GATE_OK)
#else
#define POD_OK     true
#endif
/* PODRACE: the webhook's judgement and the pod's creation may also be two steps, for one
 * pod at a time; by default they are one, as if the webhook's reads and the write were. */
#ifdef PODRACE
bool inflight = false;
byte if_js, if_A, if_J, if_att;
#endif
/* GATES: the late pod stored, gated: alive (every webhook judgement and the gate's list
 * count it), not running; its identity g_*. One at a time, like the pod in flight. */
#ifdef GATES
bool gst = false;
byte g_js, g_A, g_J, g_att;
#define GST        gst
#define G_CURRENT  (g_js == js && g_A == A && g_J == J && g_att == js_att)
#define GATE_OK    (!gst || G_CURRENT)
#ifdef NOSTARTA
#define LIFT_ID    true
#else
#define LIFT_ID    G_CURRENT
#endif
#else
#define GST        0
#define GATE_OK    true
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

/* Kueue suspends the TrainJob: its Jobs stop (their pods terminate) and no pod can be made
 * until the next NEW_EXEC. JOBLAG: that reaches the Jobs later, at Trainer's step; until
 * then the Jobs go on making the current execution's pods. */
#ifdef JOBLAG
bool jlag = false;        /* the TrainJob is suspended, its Jobs not yet */
#define SUSPEND_JOBS  jlag = true
#define JLAG_OFF      jlag = false
#define JOBS_RUN      (!suspended || jlag)
#else
#define SUSPEND_JOBS  STOP_PODS; HALT
#define JLAG_OFF      skip
#define JOBS_RUN      (!suspended)
#endif

/* StopJob and the next attempt (ATTEMPTS > 1), its pods labelled with attempt `label` */
#ifdef NOHOLDRECORD
#define CLEAR_TJHOLD skip
#else
#define CLEAR_TJHOLD tj_hold = false
#endif
#define NEXT_ATTEMPT(label) \
                att++; STOP_PODS; DROP_FIN; JLAG_OFF; \
                suspended = true; A = 0; tok = 0; tokw = 0; appr = NOJS; own_token = false; \
                TJ_WRITE; \
                wuid++; wl_hold = 0; quota = false; evicted = false; admitted = false; \
                CLEAR_TJHOLD; \
                uphase = U_FREE;            /* the hold ends with the attempt */ \
                ready = false; msg = 0; ev = 0; WL_WRITE; \
                js++; js_att = (label); J = 0; NEW_EXEC

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
#define HC_WRITE  13      /* hold copy: the record and spec.active=false on the Workload, fenced
                             by the Workload rv read */

/* the pods the decision counts: live, alive ones (CACHEDPODS: from the cache;
 * FINISHEDBLOCK: finished ones too) */
#ifdef CACHEDPODS
#define PODS_LISTED c_npods[me]
#elif defined(FINISHEDBLOCK)
#define PODS_LISTED (NALIVE + nfin)
#else
#define PODS_LISTED (NALIVE + GST)
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
                  pjs_r = 0; hc_r = 0; after = 0; FORGET_RV

/* EARLYTJ: the TrainJob is read before the pods are listed; what comes after the read
 * (``after``) waits for the list, which may still find pods (then: the wait). */
#ifdef EARLYTJ
#define FIRST_READ READ_TJ
#define AFTER_LIST after
#define THEN(x)   after = (x); pc = LIST
#else
#define FIRST_READ LIST
#define AFTER_LIST READ_TJ
#define THEN(x)   pc = (x)
#endif

/* on to approve: what the decision read is needed no more, but the Workload's rv */
#define TO_APPROVE THEN(CONFIRM2); ev_r = 0; wuid_r = 0; js_r = 0

/* on to raise A, recording the current JobSet (after a live GET of the Workload, where
 * it can be re-made: REMAKE, ATTEMPTS) */
#if (defined(REMAKE) || ATTEMPTS > 1) && !defined(NOWLCONFIRM)
#if defined(EARLYTJ) && defined(GETFIRST)
#define TO_RAISE  js_r = js; after = CONFIRM1; pc = WLCHECK   /* then the list */
#define WLCHECKED LIST
#else
#define TO_RAISE  js_r = js; THEN(WLCHECK)
#define WLCHECKED CONFIRM1
#endif
#else
#define TO_RAISE  js_r = js; THEN(CONFIRM1)
#endif

/* plan_rebind(), from the TrainJob in the cache (an older version fails RB_RAISE's fence):
 * the token is this admission's, the JobSet is not the approved one, and no alive pod of
 * another JobSet was listed */
#define RB_JUDGE  TJ_READ; \
                  if \
                  :: !TJHOLD && TOK_THIS && appr != NOJS && appr != js_r && (pjs_r == NOJS || pjs_r == js_r) -> \
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
  byte ev_r, msg_r, pods_r, wuid_r, js_r, pjs_r, hc_r;   /* what this decision read */
  byte after = 0;          /* EARLYTJ: the step after the list */

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
                :: OURS -> WL_READ; ev_r = ev; msg_r = msg; wuid_r = wuid; pc = FIRST_READ;
                     printf("MSC: r%d reads the Workload from its cache: check Pending, quota reserved, %d evictions\n", me, ev)
#if defined(JOBSETS) && !defined(NOJOBSETRECORD)
                :: REBIND -> ev_r = ev; wuid_r = wuid; pc = RB_LIST;
                     printf("MSC: r%d reads the Workload from its cache: check Ready, admitted\n", me)
#endif
#if !defined(NOHOLDRECORD) && !defined(CACHEDHOLDCOPY)
                /* The hold copy: the Workload carries no hold record (so it is active), the
                 * TrainJob in the cache carries one, and a GET of the TrainJob, live, after
                 * the Workload's read, finds it still there. The model reads both at once:
                 * a copy lands only if nothing wrote the Workload from its read to the
                 * write, so reading it at the moment of the GET instead reads the same
                 * version, and a copy that does not land does nothing (fewer states, same
                 * behaviours). */
                :: wl_active && tj_hold -> WL_READ; hc_r = holds; pc = HC_WRITE;
                     printf("MSC: r%d reads the Workload from its cache: no hold record; GETs the TrainJob: it carries hold %d\n", me, hc_r)
#elif defined(CACHEDHOLDCOPY)
                /* ...judged from the TrainJob in the cache, which may show any record the
                 * TrainJob ever had: once the user ever held, the latest hold's */
                :: wl_active && holds > 0 -> WL_READ; hc_r = holds; pc = HC_WRITE;
                     printf("MSC: r%d reads the Workload from its cache: no hold record; the TrainJob in its cache carries hold %d\n", me, hc_r)
#endif
                :: else -> FORGET                                   /* idle */
                fi }
  :: d_step { pc == LIST ->
                pods_r = PODS_LISTED;
#if (PROPS & 8) && !defined(CACHEDPODS)
                assert(pods_r == 0 || NALIVE + GST > 0);  /* (d) never waits on finished pods alone */
#endif
                if
                :: pods_r > 0 && msg_r != pods_r -> pc = WAIT;
                     printf("MSC: r%d lists %d pods\n", me, pods_r)
                :: pods_r > 0 && msg_r == pods_r -> FORGET          /* said so already */
                :: pods_r == 0 -> pc = AFTER_LIST; printf("MSC: r%d lists no pod\n", me)
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
                :: TJHOLD -> FORGET;             /* held: never approved */
                     printf("MSC: r%d reads the TrainJob from its cache: it carries hold %d; does not approve\n", me, holds)
                :: !TJHOLD && TOK_THIS -> TO_APPROVE;       /* this admission raised A already */
                     printf("MSC: r%d reads the TrainJob from its cache: A = %d, raised for this admission\n", me, A)
#ifdef TOKENEQ
                :: !TJHOLD && !TOK_THIS -> TO_RAISE;
                     printf("MSC: r%d reads the TrainJob from its cache: A = %d, token of another admission\n", me, A)
#else
                :: !TJHOLD && TOK_NEWER -> FORGET;   /* a newer one did: our read is old */
                     printf("MSC: r%d reads the TrainJob from its cache: raised for a newer admission\n", me)
                :: !TJHOLD && RAISES -> TO_RAISE;    /* none, an older admission, another Workload */
                     printf("MSC: r%d reads the TrainJob from its cache: A = %d, not raised for this admission\n", me, A)
#endif
                fi }
  /* ...or an older version, which fails the rv precondition of RAISE. Its token is one the
   * TrainJob had: this admission's if that was ever recorded, else another (a newer one's
   * would end the decision, as above). */
  :: d_step { pc == READ_TJ && raised[TOKIX(wuid_r, ev_r + 1)] ->
                TJ_OLDER; TO_APPROVE;
                printf("MSC: r%d reads an older TrainJob from its cache: raised for this admission\n", me) }
  :: d_step { pc == READ_TJ -> TJ_OLDER; THEN(CONFIRM1);
                printf("MSC: r%d reads an older TrainJob from its cache: not raised for this admission\n", me) }
#if (defined(REMAKE) || ATTEMPTS > 1) && !defined(NOWLCONFIRM)
  /* Before raising, GET the Workload live: go on only if it is still the one read (its
   * UID). The TrainJob was read before, and the raise is fenced by its rv: a Workload made
   * since can only have raised A after that read, which fails the raise. */
  :: d_step { pc == WLCHECK ->
                if
                :: wuid == wuid_r -> pc = WLCHECKED
                :: else -> FORGET; printf("MSC: r%d GETs the Workload: it is another one now; gives up\n", me)
                fi }
#endif
#ifdef JOBSETS
  /* The JobSet the raise will record (core.execution.approval_annotations) comes from the
   * cache at the same moment as the TrainJob (no request in between): above, the current
   * one; here an older one, or none (after a deletion, before its successor): then wait. */
  :: d_step { pc == READ_TJ && !TJHOLD && RAISES && js > 0 -> TJ_READ; TO_RAISE; js_r = js - 1;
                printf("MSC: r%d reads the TrainJob from its cache: A = %d, not raised for this admission; and an older JobSet %d\n", me, A, js_r) }
#ifdef RECORDNONE
  :: d_step { pc == READ_TJ && !TJHOLD && RAISES && ndel > 0 -> TJ_READ; TO_RAISE; js_r = NOJS;
                printf("MSC: r%d reads the TrainJob from its cache: A = %d, not raised for this admission; and no JobSet: the raise will record none\n", me, A) }
#else
  :: d_step { pc == READ_TJ && !TJHOLD && RAISES && ndel > 0 -> FORGET;
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
                :: WL_SAME ->                                       /* the fence */
#if (PROPS & 32)
                     assert(uphase != U_HELD);                       /* (f) not while held */
#endif
                     ready = true; msg = 0; WL_WRITE;
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

#ifndef NOHOLDRECORD
  /* The hold copy's write: the record it read and spec.active=false, fenced by the rv of
   * the Workload it judged from */
  :: d_step { pc == HC_WRITE ->
                if
                :: CONFIRMED && WL_SAME ->
#if (PROPS & 64)
                     assert(!RELEASED(hc_r));                        /* (g) not a released hold */
#endif
                     wl_hold = hc_r; WL_WRITE;
                     printf("MSC: r%d copies hold %d onto the Workload: spec.active=false\n", me, hc_r)
                :: else -> printf("MSC: r%d: the hold copy gets 409, or it does not lead\n", me)
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
  /* The user (dispatch_kubeflow.hold). A hold is two writes: the hold record on the
   * TrainJob (a merge patch fenced by its rv), then the same record and spec.active=false
   * on the Workload (fenced by its rv: a 409 re-reads and writes again, so the write is one
   * step at the version current then; a Workload that carries the record already, the
   * controller's copy, needs no write). A release, at any moment after, even before Kueue
   * acted on the hold (so an eviction of an active Workload, a preemption, is covered
   * too), is two writes too: the TrainJob's record removed (a JSON patch testing the hold
   * instance), then the Workload reactivated and its record removed. Between the writes
   * anything may happen, and the user may stop for ever. RELEASEWLFIRST: the release's
   * writes the other way round. NOHOLDRECORD: one write each, on the Workload only. */
#ifdef NOHOLDRECORD
  :: d_step { uphase == U_FREE && holds < MAXHOLD -> holds++; wl_hold = holds; WL_WRITE;
                uphase = U_HELD; printf("MSC: the user holds the job: hold %d on the Workload\n", holds) }
  :: d_step { uphase == U_HELD ->
                if
                :: wl_hold == holds -> wl_hold = 0; WL_WRITE
                :: else -> skip
                fi;
                uphase = U_FREE; printf("MSC: the user releases hold %d\n", holds) }
#else
  :: d_step { uphase == U_FREE && holds < MAXHOLD -> holds++; tj_hold = true; TJ_WRITE;
                uphase = U_HOLDING;
                printf("MSC: the user holds the job: hold %d recorded on the TrainJob\n", holds) }
  :: d_step { uphase == U_HOLDING ->
                if
                :: wl_hold != holds -> wl_hold = holds; WL_WRITE
                :: else -> skip
                fi;
                uphase = U_HELD;
                printf("MSC: the user deactivates the Workload with hold %d: the hold is complete\n", holds) }
#ifdef RELEASEWLFIRST
  :: d_step { uphase == U_HELD -> RELEASE_WL; uphase = U_RELEASING;
                printf("MSC: the user releases hold %d: reactivates the Workload first\n", holds) }
  :: d_step { uphase == U_RELEASING -> tj_hold = false; TJ_WRITE; uphase = U_FREE;
#if (PROPS & 64)
                assert(wl_hold != holds);                                 /* (g) */
#endif
                printf("MSC: the user removes hold %d from the TrainJob: the release is complete\n", holds) }
#else
  :: d_step { uphase == U_HELD -> tj_hold = false; TJ_WRITE; uphase = U_RELEASING;
                printf("MSC: the user releases hold %d: removes its record from the TrainJob\n", holds) }
  :: d_step { uphase == U_RELEASING -> RELEASE_WL; uphase = U_FREE;
#if (PROPS & 64)
                assert(wl_hold != holds);                                 /* (g) */
#endif
                printf("MSC: the user reactivates the Workload: the release of hold %d is complete\n", holds) }
#endif
#endif

  /* Kueue evicts a deactivated Workload that holds quota, in one write: Evicted=True,
   * Admitted=False, every check reset to Pending, the eviction count up by one */
  :: d_step { !wl_active && quota && !evicted ->
                evicted = true; admitted = false; ready = false; msg = 0; ev++; WL_WRITE;
                printf("MSC: Kueue evicts the Workload: check reset to Pending, %d evictions\n", ev) }
  /* Kueue's job reconciler stops a running job whose Workload is not admitted (Trainer
   * suspends the JobSet, and its Jobs: their pods terminate, slowly)... */
  :: d_step { !suspended && !admitted -> suspended = true; TJ_WRITE; SUSPEND_JOBS; own_token = false;
                printf("MSC: Kueue suspends the TrainJob: its pods terminate, slowly\n") }
#ifdef JOBLAG
  /* ...which reaches the Jobs later: Trainer suspends the JobSet, JobSet its Jobs */
  :: d_step { jlag -> jlag = false; STOP_PODS; HALT;
                printf("MSC: Trainer suspends the JobSet: its Jobs stop, their pods terminate\n") }
#endif
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
#if (PROPS & 32)
                assert(uphase != U_HELD);                                 /* (f) */
#endif
                admitted = true; gated = checkon; WL_WRITE;
                printf("MSC: Kueue admits the Workload\n") }
  /* Kueue's job reconciler starts the job of an admitted Workload: a new execution */
  :: d_step { admitted && suspended ->
                own_token = (!gated || (tok == ev + 1 && tokw == wuid));
                suspended = false; TJ_WRITE; JLAG_OFF; NEW_EXEC; ncreated = RESUMED;
                printf("MSC: Kueue unsuspends the TrainJob: a new execution\n") }

  /* The Job controller creates a pod of the running job (for a rank that has none and has
   * not finished); the webhook judges it (PODFENCE), reading the TrainJob and the pods
   * live, and gives it A from the TrainJob, J from its JobSet restart. */
  :: d_step { JOBS_RUN && ncreated < NPOD && JS_READY && POD_OK ->
                printf("MSC: a pod starts: JobSet %d, A = %d, J = %d, attempt %d, epoch %d (%d pods exist)\n",
                       js, A, J, js_att, EPOCH(js_att, A, J), NALIVE);
#if (PROPS & 1)
                assert(NALIVE == 0 || al_cur);                         /* (a) */
#endif
#if (PROPS & 128)
                assert(!(uphase == U_HELD && suspended));              /* (h) */
#endif
                if
                :: rfirst ->
#if (PROPS & 4)
                     assert(EPOCH(js_att, A, J) > lastE);              /* (c) epoch rises */
#endif
#if (PROPS & 2)
                     assert(own_token);                                /* (b) raised for it */
#endif
                     lastE = EPOCH(js_att, A, J); r_js = js; r_A = A; r_J = J; rfirst = false
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
                al_js = js; al_A = A; al_J = J; al_att = js_att }
#ifdef PODRACE
  /* ...or the webhook admits it, and the API server stores it later: the webhook's reads
   * are not the write (one such pod at a time) */
  :: d_step { JOBS_RUN && ncreated < NPOD && JS_READY && POD_OK && !inflight ->
                printf("MSC: the webhook admits a pod: JobSet %d, A = %d, J = %d, attempt %d, epoch %d (%d pods exist); not stored yet\n",
                       js, A, J, js_att, EPOCH(js_att, A, J), NALIVE);
#if (PROPS & 128)
                assert(!(uphase == U_HELD && suspended));              /* (h) */
#endif
                if
                :: rfirst ->
#if (PROPS & 4)
                     assert(EPOCH(js_att, A, J) > lastE);              /* (c) epoch rises */
#endif
#if (PROPS & 2)
                     assert(own_token);                                /* (b) raised for it */
#endif
                     lastE = EPOCH(js_att, A, J); r_js = js; r_A = A; r_J = J; rfirst = false
                :: else ->
#if (PROPS & 4)
                     assert(r_js == js && r_A == A && r_J == J)        /* (c) one each */
#else
                     skip
#endif
                fi;
                inflight = true; if_js = js; if_A = A; if_J = J; if_att = js_att; ncreated++ }
  :: d_step { inflight ->
#ifdef GATES
                printf("MSC: the API server stores the pod admitted earlier, gated: JobSet %d, A = %d, J = %d (%d pods run)\n",
                       if_js, if_A, if_J, NALIVE);
                gst = true; inflight = false;
                g_js = if_js; g_A = if_A; g_J = if_J; g_att = if_att;
#else
                printf("MSC: the API server stores the pod admitted earlier: JobSet %d, A = %d, J = %d (%d pods exist)\n",
                       if_js, if_A, if_J, NALIVE);
#if (PROPS & 16)
                assert(NALIVE == 0 || (al_js == if_js && al_A == if_A && al_J == if_J && al_att == if_att)); /* (e) */
#endif
                nrun++; al_cur = true; inflight = false;
                al_js = if_js; al_A = if_A; al_J = if_J; al_att = if_att;
#endif
                if_js = 0; if_A = 0; if_J = 0; if_att = 0 }
#ifdef GATES
  /* dispatch-admission lifts the gate; the webhook judges the lift against the pods stored
   * now (core.scheduling_gate.judge_start): the pod is of the current execution, the
   * creation's rules hold, no alive pod of another identity */
  :: d_step { gst && LIFT_ID && FENCE1 && FENCE4 && FENCE5 && FENCE6 &&
              (NALIVE == 0 || (al_js == g_js && al_A == g_A && al_J == g_J && al_att == g_att)) ->
                printf("MSC: the late pod's gate is lifted: it starts, JobSet %d, A = %d, J = %d, epoch %d (%d pods run)\n",
                       g_js, g_A, g_J, EPOCH(g_att, g_A, g_J), NALIVE);
#if (PROPS & 4)
                assert(EPOCH(g_att, g_A, g_J) >= lastE);   /* (c) no older execution after a newer one */
#endif
#if (PROPS & 16)
                assert(NALIVE == 0 || (al_js == g_js && al_A == g_A && al_J == g_J && al_att == g_att)); /* (e) */
#endif
                nrun++; al_cur = G_CURRENT; gst = false;
                al_js = g_js; al_A = g_A; al_J = g_J; al_att = g_att }
  /* the gated pod is deleted (its Job's, once suspended or deleted; or anyone) */
  :: d_step { gst -> gst = false; printf("MSC: the gated pod is deleted\n") }
#endif
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
  :: d_step { ndel < MAXRECREATE -> ndel++; STOP_PODS; DROP_FIN; HALT; JLAG_OFF;
                js++; js_att = att; J = 0; NEW_EXEC;
                printf("MSC: someone deletes JobSet %d: its pods terminate; Trainer makes JobSet %d: a new execution\n", js - 1, js) }
  /* JobSet restarts the running JobSet (a pod failed): J + 1, new Jobs */
  :: d_step { !suspended && nrst < MAXRESTART -> J++; nrst++; STOP_PODS; DROP_FIN;
                NEW_EXEC; printf("MSC: JobSet %d restarts: J = %d, a new execution\n", js, J) }
#endif
#ifdef REMAKE
  /* Kueue finds the Workload, held or not, no longer matches the job, or anyone deleted
   * it: Kueue suspends the job if it runs, and makes a new one: a new UID, active, no hold
   * record, no quota, not admitted (jobframework's ensureOneWorkload suspends a running
   * job first; the model does it all in one step) */
  :: d_step { nremake < MAXREMAKE ->
                if
                :: !suspended -> suspended = true; TJ_WRITE; SUSPEND_JOBS; own_token = false
                :: else -> skip
                fi;
                nremake++; wuid++; wl_hold = 0; quota = false; evicted = false; admitted = false;
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
   * the service starts the next attempt: a TrainJob of the same name, A = 0; Trainer
   * builds its JobSet from the new runtime copy (STALERUNTIME: or from the attempt
   * before's, still in its cache) */
  :: d_step { att < ATTEMPTS -> NEXT_ATTEMPT(att);
                printf("MSC: StopJob, and attempt %d starts: TrainJob, Workload %d, JobSet %d\n", att, wuid, js) }
#ifdef STALERUNTIME
  :: d_step { att < ATTEMPTS -> NEXT_ATTEMPT(att - 1);
                printf("MSC: StopJob, and attempt %d starts: TrainJob, Workload %d, JobSet %d built from attempt %d's runtime copy\n", att, wuid, js, js_att) }
#endif
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
