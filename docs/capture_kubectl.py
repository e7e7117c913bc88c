"""Write docs/kubectl.md from a live cluster, so its output cannot drift from the plugin's.

    python docs/capture_kubectl.py --settings FILE [--out docs/kubectl.md]
    python docs/capture_kubectl.py --check [docs/kubectl.md]

The page is :data:`TEMPLATE` with what each ``console`` block's command printed filled in
below it. Capturing needs a cluster with the admission controller and the settings of a
Kueue-mode namespace (``tests/cluster/test_cli.py`` captures into its own namespace on
every run, and writes the page with ``DISPATCH_CAPTURE_DOCS=1``). Directives in HTML
comments (invisible on the site) say what happens between the commands: ``start`` starts
a job through the library, ``wait STATE`` waits for it, ``sleep N`` lets its log grow.

``--check`` needs no cluster: the page must be the template exactly, outside the output
lines (with the captured job id and reference in place of ``{JOB}`` and ``{REF}``), and
every command must have printed something. ``make docs`` and the unit tests run it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import dispatch_kubeflow as dk

PAGE = Path(__file__).resolve().parent / "kubectl.md"
PROMPT = "$ kubectl dispatch "
DIRECTIVE = re.compile(r"^<!-- capture: (.+) -->$")
COMMAND = ("env | grep '^DISPATCH_' | sort; trap 'sleep 2; exit 143' TERM; i=0; "
           "while :; do echo step $i; i=$((i+1)); sleep 1; done")

TEMPLATE = """\
# Operate dispatch jobs with kubectl

The people on call for a service that runs dispatch jobs work from a terminal. The
`kubectl dispatch` plugin answers what they ask: which dispatch jobs are in this
namespace, which execution is running, who holds this one and until when, why that one
is not admitted; stop it and show me it is gone. Every command is built on the library's
public API, so it says what `Backend.inspect`, `Backend.jobs` and `Backend.events` say.

<!-- This page is written by docs/capture_kubectl.py from a live local cluster. -->

## Install it

The plugin comes with the package's `cli` extra, as the console script
`kubectl-dispatch` ([Install the package](install.md)). kubectl finds any executable named
`kubectl-*` on your `PATH`:

```sh
pip install '.[cli]'         # in a checkout; from the git URL: see Install the package
kubectl plugin list          # lists .../kubectl-dispatch
kubectl dispatch --help
```

Installed without the extra, the command says so on one line and exits 2:
`kubectl-dispatch: needs the 'cli' extra (click not installed): pip install
'dispatch-kubeflow[cli]'`. `dispatch-admission` does the same for the `admission` extra.

## Tell it where to work

Like kubectl, it works where your kubeconfig's current context points: that context's
cluster and namespace (`default` when the context names none). `--kubeconfig FILE`,
`--context NAME` and `-n NAMESPACE` choose another, as kubectl's own flags do; they go
before or after the command: `kubectl dispatch get -n tutorial`. Without a settings file,
a command learns Kueue or plain mode from the cluster: from the job's TrainJob (its
`kueue.x-k8s.io/queue-name` label) for `hold`, else Kueue mode where Kueue is installed.

A settings file says what only it can: `preflight`, `open` and `release` run the
library's preflight, whose probe needs `probeRuntime` (and `kueue`, in Kueue mode).
Without one they say so on one line, naming the key. The file is the library's JSON
settings section (see the [configuration reference](reference/configuration.md)), from the
first of:

1. `--settings FILE`;
2. `$DISPATCH_KUBEFLOW_SETTINGS`;
3. `~/.config/dispatch-kubeflow/settings.json` (under `$XDG_CONFIG_HOME` when set).

With a file, `--kubeconfig`, `--context` and `-n` override its `cluster.kubeconfig`,
`cluster.context` and `namespace`. An API server that refuses connections or answers 429
or 503 is ridden out for 3 s a request (the library's default, for services, is 30 s:
`timeouts.transient`); a settings file that sets `timeouts.transient` keeps its own.

```json
{
  "cluster": {"kubeconfig": "/tmp/dk.kubeconfig"},
  "namespace": "tutorial",
  "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
  "kueue": {"localQueue": "lq", "priorityClass": "low"}
}
```

Exit codes: 0 done; 1 an error; 2 a bad command line; 3 done, but not everything is
proven (`preflight` found the backend observe-only, or `stop` left something alive or
unproven); 130 interrupted. An error is one line on stderr that names the field and the
fix, and nothing is written to the cluster before the command line, the job id and the
settings have been checked. When stderr is a terminal, a wait longer than a second shows a
spinner there. `kubectl dispatch version` (or `--version`) prints the plugin's version.

Completion for bash and zsh: `source <(kubectl dispatch completion bash)` (or `zsh`) in
your shell's startup file completes `kubectl-dispatch` commands and options.

## Prove what the cluster can do

`preflight` runs the library's preflight and prints each capability with its value, how
it was decided and why:

```console
$ kubectl dispatch preflight
```

`open` and `release` run it too, because the library refuses them when the backend is
observe-only. The other commands skip it and answer at once.

## List the jobs

A service started a job (the capture does it as `examples/service.py` would). `get`
lists every submission of every dispatch job in the namespace, one request per kind:

<!-- capture: start -->
```console
$ kubectl dispatch get
```

PODS is running of existing pods, A and J are the admission and restart counts, HOLD the
hold's instance. The job is `gated`: started closed behind dispatch's gate. Open it with
the reference Start returned (or the job id):

```console
$ kubectl dispatch open {REF}
```

<!-- capture: wait running -->
```console
$ kubectl dispatch get
```

`-o json` and `-o yaml` print the same as data, `-o wide` adds the TrainJob, the
execution's epoch and the MultiKueue worker it runs in (`worker` in the data; `-` outside
MultiKueue mode), `-o name` prints `trainjob.trainer.kubeflow.org/<name>` as kubectl
does; `--no-headers` drops the header, `-A` lists every namespace, `get JOB` one job's
submissions. `-w` prints each job again whenever its row changes, and `gone` when its
TrainJob disappears. In MultiKueue mode (a settings file with `kueue.multiKueue`) PODS
counts the pods in the worker the job runs in, as Inspect does, and `logs` reads rank N's
log there ([Run dispatch jobs across clusters](multikueue.md)).

```console
$ kubectl dispatch get -o yaml
```

## Look at one job

`describe` shows the job's submissions, the identity of the current execution (what its
pods see as `DISPATCH_ATTEMPT` and `DISPATCH_EPOCH`), its hold, why it is in its state,
every object it has and its latest Events:

```console
$ kubectl dispatch describe {JOB}
```

`logs` prints rank 0's log of the current execution (`--rank N` for another node,
`--stderr` for the other stream, `-f` to follow, `--tail N` for the last lines only,
`--since 10m` for what was logged since):

<!-- capture: sleep 3 -->
```console
$ kubectl dispatch logs {JOB}
```

`events` prints the Kubernetes Events of all the job's objects in time order, the
admission controller's included (`-w` follows):

```console
$ kubectl dispatch events {JOB}
```

## Hold and release

A hold ends the execution and keeps the job from being admitted until it is released or
its `--until` passes (a time, or a duration from now). Its instance is the next one (1
for a job never held) unless `--instance N` names it, and is printed:

```console
$ kubectl dispatch hold {JOB} --until 2h --reason "incident 4711"
```

<!-- capture: wait held -->
```console
$ kubectl dispatch get
```

A release names the hold's instance. Releasing a job that is not held changes nothing
and says so:

```console
$ kubectl dispatch release {JOB} --instance 1
```

```console
$ kubectl dispatch release {JOB} --instance 1
```

<!-- capture: wait running -->
```console
$ kubectl dispatch describe {JOB}
```

The new execution has A = 2: the admission controller re-admitted the job only after every
pod of the first execution had gone.

## Stop it and show it is gone

`stop` records the reason as an Event, deletes everything of the job and proves it is
gone. It exits 3 if anything is alive or unproven, also when `--timeout` (default the
settings' `timeouts.stopJob`, 3m) passes first; interrupted with Ctrl-C, it says what it
had deleted so far.

```console
$ kubectl dispatch stop {JOB} --reason "incident 4711 is over"
```

```console
$ kubectl dispatch get
```

## When something is wrong

Every mistake is one line naming what is wrong and how to fix it, and changes nothing:

```console
$ kubectl dispatch describe 01-not-a-job-id
```

```console
$ kubectl dispatch hold {JOB} --reason later --kubeconfig /nonexistent
```
"""


def blocks(text: str) -> list[tuple[int, int]]:
    """(first, last) line index of each console block's body (between its fences)."""
    lines = text.splitlines()
    out, start = [], None
    for i, line in enumerate(lines):
        if line == "```console":
            start = i + 1
        elif line == "```" and start is not None:
            out.append((start, i - 1))
            start = None
    return out


def skeleton(text: str, job: str | None = None, ref: str | None = None) -> str:
    """The page without output lines, the job id and ref put back as placeholders."""
    lines = text.splitlines()
    drop: set[int] = set()
    for first, last in blocks(text):
        drop.update(range(first + 1, last + 1))  # everything after the command line
    kept = [line for i, line in enumerate(lines) if i not in drop]
    out = "\n".join(kept) + "\n"
    if ref:
        out = out.replace(ref, "{REF}")
    if job:
        out = out.replace(job, "{JOB}")
    return out


def check(page: Path = PAGE) -> list[str]:
    """What is wrong with the page (nothing: [])."""
    text = page.read_text()
    problems = []
    found = re.search(r"\bdj-([0-9a-z]{26})-s\d+\b", text)
    job = found.group(1).upper() if found else None
    ref = re.search(r"\$ kubectl dispatch open (\S+)", text)
    if skeleton(text, job, ref.group(1) if ref else None) != TEMPLATE:
        problems.append(f"{page} is not what the template of {Path(__file__).name} expects: "
                        "run the capture again (see its docstring)")
    for first, last in blocks(text):
        if last <= first:
            problems.append(f"{page}:{first + 1}: the command printed nothing: "
                            f"{text.splitlines()[first]}")
    return problems


async def capture(settings_file: Path, cli: list[str]) -> str:
    """Run the template's commands against the cluster of ``settings_file``; the page."""
    settings = dk.Settings.parse(settings_file.read_text())  # noqa: ASYNC240 - small, local
    env = {**os.environ, "DISPATCH_KUBEFLOW_SETTINGS": str(settings_file),
           "COLUMNS": "200"}
    out: list[str] = []
    job: dk.JobID | None = None
    ref: dk.ObjectRef | None = None
    async with await dk.Backend.connect(settings) as backend:  # it starts the job
        try:
            for line in TEMPLATE.splitlines():
                directive = DIRECTIVE.match(line)
                if directive:
                    job, ref = await act(backend, directive.group(1), job, ref)
                if line.startswith(PROMPT):
                    line = line.replace("{JOB}", str(job)).replace("{REF}", ref.id if ref
                                                                     else "")
                    out.append(line)
                    out += await run(cli, line.removeprefix(PROMPT), env)
                    continue
                out.append(line)
        finally:
            if job is not None:
                await backend.stop_job(job, "the capture is over")
    return "\n".join(out) + "\n"


async def act(backend: dk.Backend, directive: str, job: dk.JobID | None,
              ref: dk.ObjectRef | None) -> tuple[dk.JobID | None, dk.ObjectRef | None]:
    word, _, arg = directive.partition(" ")
    if word == "start":
        job = dk.JobID.new()
        spec = dk.JobSpec(["/bin/sh", "-c", COMMAND], 2, [
            dk.Image("localhost/dispatch-busybox:kind", "IfNotPresent"),
            dk.RuntimeRef("ClusterTrainingRuntime", "dispatch-kind")])
        ref = await backend.start(dk.StartRequest(job, 1, 1, spec))
    elif word == "wait" and ref is not None:
        async with asyncio.timeout(240):
            while True:
                obs = await backend.wait(ref, dk.ObjectState(arg))
                if obs.state is not dk.ObjectState.RUNNING or obs.pods_running == obs.pods > 0:
                    break
                await asyncio.sleep(0.5)  # running, but the pods are still starting
    elif word == "sleep":
        await asyncio.sleep(float(arg))
    else:
        raise ValueError(f"unknown directive {directive!r}")
    return job, ref


async def run(cli: list[str], args: str, env: dict[str, str]) -> list[str]:
    proc = await asyncio.create_subprocess_exec(
        *cli, *shlex.split(args), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env=env)
    printed, _ = await asyncio.wait_for(proc.communicate(), 240)
    return printed.decode().rstrip("\n").splitlines()


def plugin() -> list[str]:
    found = shutil.which("kubectl-dispatch") or str(Path(sys.executable).parent /
                                                    "kubectl-dispatch")
    return [found] if Path(found).exists() else [sys.executable, "-m", "dispatch_kubeflow.cli"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", type=Path, help="a Kueue-mode namespace's settings")
    parser.add_argument("--out", type=Path, default=PAGE)
    parser.add_argument("--check", nargs="?", const=PAGE, type=Path, metavar="PAGE")
    args = parser.parse_args()
    if args.check:
        problems = check(args.check)
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    if not args.settings:
        parser.error("--settings FILE is needed to capture (or --check)")
    args.out.write_text(asyncio.run(capture(args.settings, plugin())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
