"""``rephrase``: N problem-equivalent rephrasings per training question; OpenAI-compatible
endpoints (shared with the equivalence checks' solver)."""

from __future__ import annotations

import os
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import model_validator

from tagrpo.plumbing.config_model import ConfigModel, EnvVarName, Field
from tagrpo.plumbing.errors import MissingSecretError

DEFAULT_BASE_URL = "https://api.openai.com/v1"  # the openai client's default


class EndpointConfig(ConfigModel):
    """Where and how to send chat requests: any OpenAI-compatible endpoint."""

    base_url: str | None = Field(
        description="null = api.openai.com; e.g. http://127.0.0.1:8000/v1 for vllm serve"
    )
    model: str = Field(min_length=1, description="model name at the endpoint")
    api_key_env: EnvVarName = Field(
        description="environment variable holding the key (null: a server without auth)",
    )
    temperature: float = Field(ge=0, le=10, description="sampling temperature")
    top_p: float = Field(gt=0, le=1, description="nucleus sampling")
    max_tokens: int = Field(ge=1, le=1_000_000, description="reply length limit, tokens")
    concurrency: int = Field(ge=1, le=4096, description="requests in flight")
    timeout_s: float = Field(gt=0, le=86400, description="per-request timeout, seconds")
    max_attempts: int = Field(ge=1, le=100, description="attempts per request (retries + 1)")
    backoff_base_s: float = Field(ge=0, description="first retry delay (exponential, jitter)")
    backoff_max_s: float = Field(ge=0, description="longest retry delay")
    retry_after_max_s: float = Field(ge=0, description="longest Retry-After honoured")
    send_seed: bool = Field(description="send a seed (OpenAI and vLLM accept it)")

    def api_key(self) -> str:
        """The key from the environment; a clear error if the variable is not set."""
        if self.api_key_env is None:
            return "EMPTY"  # placeholder the client requires; servers without auth ignore it
        value = os.environ.get(self.api_key_env)
        if not value:
            raise MissingSecretError(
                f"the environment variable {self.api_key_env} (api_key_env) is not set; "
                "export the API key there (set api_key_env: null for servers without auth)"
            )
        return value

    def sampling(self) -> dict[str, Any]:
        """The sampling settings that enter cache keys."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}

    def endpoint_url(self) -> str:
        """Where requests go, normalised: the openai client's own fallback when ``base_url``
        is null (``OPENAI_BASE_URL``, else api.openai.com), no trailing slash, lower-case
        scheme and host."""
        url = self.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        parts = urlsplit(url.strip())
        path = parts.path.rstrip("/")
        return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))

    def reply_identity(self) -> dict[str, Any]:
        """Everything of the endpoint that changes a reply, for cache keys (never the key):
        a cache filled at one server is not served for another."""
        return {
            "endpoint": self.endpoint_url(),
            "model": self.model,
            "sampling": self.sampling(),
            "send_seed": self.send_seed,
        }


class LocalRephraseModel(ConfigModel):
    model: str = Field(min_length=1, description="a transformers model folder")
    temperature: float = Field(gt=0, le=10, description="sampling temperature")
    top_p: float = Field(gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(ge=1, le=131072, description="reply length limit, tokens")
    max_batch_sequences: int = Field(ge=1, description="generation batch, sequences")


class RephraseSettings(ConfigModel):
    backend: Literal["rules", "openai", "hf"] = Field(
        description="rules (offline, equivalent by construction) | openai | hf"
    )
    n: int = Field(ge=1, le=64, description="rephrasings per question: N")
    # A profile that trains on a few questions (train.questions) need not rephrase and check
    # the whole source: local.yaml's 2 questions of MATH's 7,500 took check_equivalence 25 min.
    max_questions: int | None = Field(
        ge=1,
        description="rephrase and check only the first questions of the training set (null = "
        "all); at least train.questions",
    )
    template: str = Field(
        min_length=1, description="built-in prompt (tagrpo/data/rephrase_templates.py)"
    )
    template_file: str | None = Field(description="or a text file with your own prompt")
    requests: Literal["per_variant", "choices", "numbered"] = Field(
        description="N requests | one request with n=N | one numbered list"
    )
    cache_dir: str = Field(min_length=1, description="reply cache, outside DVC outputs")
    max_failed_share: float = Field(
        ge=0.0,
        le=1.0,
        description="fail the stage when more than this share of slots has no rephrasing",
    )
    openai: EndpointConfig
    hf: LocalRephraseModel

    @model_validator(mode="after")
    def _template(self) -> RephraseSettings:
        if self.template_file is None:
            from tagrpo.data.rephrase_templates import TEMPLATES

            if self.template not in TEMPLATES:
                raise ValueError(
                    f"template {self.template!r} is not built in; allowed: {sorted(TEMPLATES)}"
                )
        return self
