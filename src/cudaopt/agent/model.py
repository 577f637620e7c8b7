"""The model: any chat model LangChain's ``init_chat_model`` knows, called with retries and tools.

Credentials are read from the environment by the provider's client and never stored: nothing
here writes settings, headers or keys to disk.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

PROVIDER_KEYS = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "google_genai": "GOOGLE_API_KEY",
    "mistralai": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "xai": "XAI_API_KEY",
    "together": "TOGETHER_API_KEY",
    "fireworks": "FIREWORKS_API_KEY",
}
_PACKAGES = {"google_genai": "langchain-google-genai", "mistralai": "langchain-mistralai"}
_REASONING_PREFIXES = ("gpt-5", "o1", "o3", "o4")

# USD per million tokens (input, output), public list prices; override with --prices FILE.
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    "gpt-5": {"input": 1.25, "output": 10.0},
    "gpt-5-mini": {"input": 0.25, "output": 2.0},
    "gpt-5-nano": {"input": 0.05, "output": 0.4},
    "gpt-4.1": {"input": 2.0, "output": 8.0},
    "gpt-4.1-mini": {"input": 0.4, "output": 1.6},
    "o4-mini": {"input": 1.1, "output": 4.4},
}


class ModelError(RuntimeError):
    """The model could not be reached or refused the request after every retry; ``fatal`` when
    asking again cannot help (the credentials are refused)."""

    def __init__(self, message: str, fatal: bool = False):
        super().__init__(message)
        self.fatal = fatal


def _fatal(exc: Exception) -> bool:
    """An authentication or permission failure: no retry, and no later proposal, can succeed."""
    try:
        import openai

        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return True
    except ImportError:  # another provider: fall back to the status code, if any
        pass
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    return status in (401, 403)


@dataclass
class ModelSettings:
    model: str = "openai:gpt-5-mini"
    reasoning_effort: str = "medium"
    base_url: str | None = None
    max_retries: int = 4
    retry_base_s: float = 2.0
    timeout_s: float = 600.0
    prices: dict[str, dict[str, float]] = field(default_factory=lambda: dict(DEFAULT_PRICES))

    @property
    def provider(self) -> str:
        return self.model.split(":", 1)[0] if ":" in self.model else "openai"

    @property
    def name(self) -> str:
        return self.model.split(":", 1)[1] if ":" in self.model else self.model

    def public(self) -> dict:
        """What may be recorded about the model (no credentials)."""
        return {"model": self.model, "reasoning_effort": self.reasoning_effort, "base_url": self.base_url}


def credentials_problem(settings: ModelSettings) -> str | None:
    """Why the chosen model cannot be used here, with what to do; None when it can."""
    provider = settings.provider
    package = "langchain_" + provider
    if importlib.util.find_spec(package) is None:
        dist = _PACKAGES.get(provider, "langchain-" + provider.replace("_", "-"))
        return f"model {settings.model} needs the package {dist}: pip install {dist}"
    if provider == "openai" and settings.base_url:
        return None  # local OpenAI-compatible servers usually need no key
    var = PROVIDER_KEYS.get(provider)
    if var and not os.environ.get(var):
        hint = " (or --base-url URL for an OpenAI-compatible server such as vLLM, Ollama or llama.cpp)"
        return f"model {settings.model} needs {var}: export {var}=...{hint if provider == 'openai' else ''}"
    return None


def make_chat_model(settings: ModelSettings):
    from langchain.chat_models import init_chat_model

    kwargs: dict = {"max_retries": 0, "timeout": settings.timeout_s}
    if settings.provider == "openai":
        kwargs["use_responses_api"] = False
        if settings.base_url:
            kwargs["base_url"] = settings.base_url
            kwargs["api_key"] = os.environ.get("OPENAI_API_KEY") or "not-needed"
        if settings.name.startswith(_REASONING_PREFIXES):
            kwargs["reasoning_effort"] = settings.reasoning_effort  # gpt-5 models take no temperature
    return init_chat_model(settings.model, **kwargs)


@dataclass
class Reply:
    """One proposal turn: the final text, the transcript, tool calls, usage and cost."""

    text: str
    messages: list[dict]
    tool_calls: list[dict]
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    calls: int = 0  # requests sent to the model in this turn (tool rounds included)
    retries: int = 0
    latency_s: float = 0.0
    error: str | None = None
    fatal: bool = False  # the error ends the run (see ModelError)


def _retryable(exc: Exception) -> bool:
    try:
        import openai

        if isinstance(exc, (openai.RateLimitError, openai.APIConnectionError, openai.APITimeoutError,
                            openai.InternalServerError)):
            return True
    except ImportError:  # another provider: fall back to the status code, if any
        pass
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "response", None), "status_code", None)
    return status in (408, 409, 429) or (isinstance(status, int) and status >= 500)


class ModelClient:
    """Asks the model for a proposal; runs the tools it calls; retries transient failures."""

    MAX_TOOL_ROUNDS = 4

    def __init__(self, chat_model, settings: ModelSettings, tools: dict[str, Callable[[], dict]],
                 sleep: Callable[[float], None] = time.sleep):
        from langchain_core.tools import StructuredTool

        self.settings = settings
        self.tools = tools
        specs = [StructuredTool.from_function(fn, name=name, description=fn.__doc__ or name)
                 for name, fn in tools.items()]
        self.model = chat_model.bind_tools(specs) if specs else chat_model
        self.sleep = sleep

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        price = self.settings.prices.get(self.settings.name)
        if not price:
            return 0.0
        return (input_tokens * price["input"] + output_tokens * price["output"]) / 1e6

    def ask(self, system: str, user: str, budget_left: Callable[[], bool] = lambda: True) -> Reply:
        from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage

        messages = [SystemMessage(system), HumanMessage(user)]
        reply = Reply(text="", messages=[], tool_calls=[])
        start = time.perf_counter()
        try:
            for _ in range(self.MAX_TOOL_ROUNDS + 1):
                response = self._invoke(messages, reply)
                messages.append(response)
                if not response.tool_calls or not budget_left():
                    reply.text = _text(response.content)
                    break
                for call in response.tool_calls:
                    result = self._run_tool(call["name"], call.get("args") or {})
                    reply.tool_calls.append({"name": call["name"], "args": call.get("args") or {}, "result": result})
                    messages.append(ToolMessage(json.dumps(result), tool_call_id=call["id"]))
            else:
                reply.text = _text(messages[-1].content)
        except ModelError as exc:
            reply.error, reply.fatal = str(exc), exc.fatal
        reply.latency_s = round(time.perf_counter() - start, 3)
        reply.messages = [_plain(m) for m in messages]
        return reply

    def _run_tool(self, name: str, args: dict) -> dict:
        fn = self.tools.get(name)
        if fn is None:
            return {"error": f"unknown tool {name!r}; available: {sorted(self.tools)}"}
        try:
            return fn(**args)
        except Exception as exc:  # a tool failure goes back to the model, it does not end the run
            return {"error": f"{exc.__class__.__name__}: {exc}"}

    def _invoke(self, messages, reply: Reply):
        for attempt in range(self.settings.max_retries + 1):
            reply.calls += 1
            try:
                response = self.model.invoke(messages)
            except Exception as exc:
                if attempt < self.settings.max_retries and _retryable(exc):
                    reply.retries += 1
                    self.sleep(min(60.0, self.settings.retry_base_s * 2**attempt))
                    continue
                raise ModelError(f"{exc.__class__.__name__}: {_first_line(exc)}", fatal=_fatal(exc)) from None
            usage = getattr(response, "usage_metadata", None) or {}
            reply.input_tokens += int(usage.get("input_tokens", 0))
            reply.output_tokens += int(usage.get("output_tokens", 0))
            details = usage.get("output_token_details") or {}
            reply.reasoning_tokens += int(details.get("reasoning", 0) or 0)
            refusal = (getattr(response, "additional_kwargs", {}) or {}).get("refusal")
            if refusal:
                raise ModelError(f"the model refused: {refusal}")
            return response
        raise ModelError("no answer")  # pragma: no cover (the loop returns or raises)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else exc.__class__.__name__


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return str(content)


def _plain(message) -> dict:
    out = {"role": message.type, "content": _text(message.content)}
    if getattr(message, "tool_calls", None):
        out["tool_calls"] = [{"name": c["name"], "args": c.get("args")} for c in message.tool_calls]
    if getattr(message, "tool_call_id", None):
        out["tool_call_id"] = message.tool_call_id
    return out
