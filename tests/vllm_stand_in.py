"""A loopback stand-in for ``vllm serve``: ``GET /v1/models`` and ``POST /v1/completions``.

It serves a real (tiny) transformers model for the served-model check: a request with
``echo`` and ``logprobs`` gets the prompt's token log-probabilities computed by that model
(in ``dtype``: bfloat16 stands in for a GPU server's numerics), as vLLM returns them. Sampling
requests get scripted choices, out of order, with vLLM's ``token_ids`` extension (sample ``j``
is ``\\boxed{j}``). Every request body is recorded.

    with VLLMStandIn(model_dir, served_name="policy") as server:
        server.base_url  # http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch


class VLLMStandIn:
    def __init__(
        self,
        model_dir: str | Path,
        served_name: str,
        root: str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        from transformers import AutoModelForCausalLM

        self.served_name = served_name
        self.root = str(model_dir) if root is None else root
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval()
        self.bodies: list[dict[str, Any]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/") != "/v1/models":
                    self._reply(404, {"error": {"message": f"no route {self.path}"}})
                    return
                entry = {"id": stand_in.served_name, "object": "model", "created": 0}
                entry.update({"owned_by": "vllm", "root": stand_in.root})
                self._reply(200, {"object": "list", "data": [entry]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.bodies.append(body)
                if body["model"] != stand_in.served_name:
                    message = f"The model `{body['model']}` does not exist."
                    self._reply(404, {"error": {"message": message, "code": 404}})
                    return
                if body.get("echo") and body.get("logprobs") is not None:
                    status, payload = stand_in.echo(body["prompt"])
                    self._reply(status, payload)
                    return
                choices = [
                    {
                        "index": j,
                        "text": f"\\boxed{{{j}}}",
                        "token_ids": [7] * (j + 2),
                        "finish_reason": "stop" if j else "length",
                        "logprobs": None,
                    }
                    for j in reversed(range(body["n"]))  # out of order on purpose
                ]
                self._reply(200, stand_in.completion(choices))

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> VLLMStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def sampling_requests(self) -> list[dict[str, Any]]:
        return [body for body in self.bodies if not body.get("echo")]

    def completion(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": self.served_name,
            "choices": choices,
        }

    def echo(self, prompt: list[int]) -> tuple[int, dict[str, Any]]:
        vocabulary = self.model.config.vocab_size
        if any(not 0 <= token < vocabulary for token in prompt):
            message = f"Token id out of vocabulary (size {vocabulary})"
            return 400, {"error": {"message": message, "code": 400}}
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt])).logits[0].float()
        log_probs = torch.log_softmax(logits, dim=-1)
        prompt_values = log_probs[:-1].gather(1, torch.tensor(prompt[1:])[:, None])[:, 0]
        generated = int(log_probs[-1].argmax())
        values = [None, *prompt_values.tolist(), float(log_probs[-1, generated])]
        choice = {
            "index": 0,
            "text": "",
            "finish_reason": "length",
            "logprobs": {
                "tokens": [str(t) for t in [*prompt, generated]],
                "token_logprobs": values,
                "top_logprobs": None,
                "text_offset": [0] * len(values),
            },
        }
        return 200, self.completion([choice])
