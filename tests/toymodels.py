"""Tiny random GGUF models for offline tests.

Real draft/target pairs weigh hundreds of megabytes, so the tests run on four toy models
written here with the `gguf` package in a fraction of a second each. They are Qwen2
architecture, f32, with random weights from fixed numpy seeds, so every run builds the
same bytes and every greedy generation is reproducible.

Why each model exists:

* ``small``: the draft. 64-wide, 2 layers.
* ``large``: a target with the same tokenizer but independent weights (128-wide, 4
  layers). It rarely agrees with ``small``, which exercises the "target takes over" paths.
* ``related``: a target built as ``small`` plus a little noise plus two extra, weakly
  contributing layers. It agrees with ``small`` on part of the tokens, like a real
  draft/target pair, so both the accept and the reject paths are taken.
* ``other_vocab``: a model whose vocabulary differs in size and in token texts, for the
  "draft and target must share a tokenizer" checks.

The recipe:

* Tokenizer: byte-level BPE exactly as GPT-2/Qwen2 do it (``tokenizer.ggml.model =
  "gpt2"``, ``pre = "qwen2"``): the 256 byte tokens in the GPT-2 ``bytes_to_unicode``
  alphabet, then merges learned from a small English text by plain BPE, then the ChatML
  control tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``. As in the Qwen2.5
  instruct GGUFs, EOS is ``<|im_end|>``, BOS and padding are ``<|endoftext|>``, no BOS is
  added, and llama.cpp treats both ``<|im_end|>`` and ``<|endoftext|>`` as end of
  generation. Emoji and CJK characters have no merges, so they tokenize into several
  byte tokens each, and the random models sometimes emit partial UTF-8 sequences.
* Weights: embeddings are tied (no ``output.weight``, like Qwen2.5-0.5B). Embedding rows
  have a small norm so that the residual stream is dominated by the layers' outputs (with
  std-1 embeddings the hidden state stays close to the last token's own row and the model
  repeats one token forever). The logit scale lives in ``output_norm.weight``, unevenly
  spread over the dimensions so that the draft's confidence varies a lot from token to
  token. Row norms of rare-by-design tokens (non-ASCII bytes, control tokens) are adjusted
  so partial UTF-8 and EOS happen, but seldom.

Measured with llama-cpp-python 0.3.36 (greedy, 60 tokens, eight short English and
ChatML prompts): the perplexity of ``small``'s own greedy choice, exp(-logprob), has
5/25/50/75/95th percentiles of about 1.6/3.6/6.4/11/20 and every run has tokens below 2
and above 20; ``related`` picks ``small``'s token (given small's prefix) at about 55% of
positions (85% where small's perplexity is below 2), ``large`` at about 0%. ``small``'s
greedy runs rarely end within 200 tokens ("My name is Sam" does, after 54 tokens);
its sampled runs at temperature 0.8 end with ``<|im_end|>`` about half the time.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

# Bump when the recipe changes: the version is part of the file names, so stale files in a
# cache directory are never mistaken for current ones.
RECIPE_VERSION = 1

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# The Qwen2.5 instruct chat template (ChatML with a default system prompt and tool calls).
QWEN25_CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.'
    "\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n"
    '<tools>" }}\n'
    "    {%- for tool in tools %}\n"
    '        {{- "\\n" }}\n'
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name '
    "and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>'
    '<|im_end|>\\n" }}\n'
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) '
    'or (message.role == "assistant" and not message.tool_calls) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content"
    " + '<|im_end|>' + '\\n' }}\n"
    '    {%- elif message.role == "assistant" %}\n'
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

# Training text for the main tokenizer's merges: plain English with the phrases the tests
# use ("My name is", "The cat sat on the mat"), so those come out as a few whole-word tokens.
ENGLISH_TEXT = """\
The cat sat on the mat. The dog sat on the mat too. The cat and the dog are friends.
My name is Anna. My name is Alex. What is your name? My name is Sam, and this is my cat.
Once upon a time there was a little cat who lived in a small house by the sea.
Every morning the cat sat on the mat in the sun and looked at the boats on the water.
The boats went out in the morning and came back in the evening with fish for the town.
The people of the town were kind to the cat, and the cat was kind to them.
One day a big storm came over the sea. The wind was strong and the rain was cold.
The cat ran into the house and sat by the fire until the storm was over.
When the sun came back, the cat went out again and sat on the mat as it always did.
I think that the best time of the day is the morning, when the world is quiet.
She said that she would come to the party, but she did not come.
He was going to the market to buy some bread, some milk and some eggs.
We have been working on this project for a long time, and we are happy with it.
They will be here in an hour. Please tell them that we are waiting for them.
This is a simple story about a cat, a dog, a mat and a small house by the sea.
Can you help me with my homework? Yes, I can help you with your homework after dinner.
The weather today is nice and warm. Tomorrow it will be cold and there will be rain.
There are many things that we can learn from the story of the cat on the mat.
Hello! How are you? I am fine, thank you. It is nice to meet you. My name is Ben.
The quick brown fox jumps over the lazy dog. The lazy dog does not move at all.
"""

# A different text for the other vocabulary, so it learns different merges.
OTHER_TEXT = """\
Stars shine brightly above quiet northern villages during winter nights.
Travelers crossing frozen rivers often carry lanterns, ropes, maps and warm blankets.
Scientists measure glacier movement using satellites, sensors and careful notes.
Markets open early; merchants arrange apples, onions, carrots and fresh herbs.
Musicians practice scales slowly, repeating difficult passages until fingers remember.
Gardeners plant tulips in autumn so colorful flowers appear after spring rains.
Programmers write functions, test modules, fix errors, and document interfaces.
"""


@dataclass(frozen=True)
class ToyModels:
    """Paths of the toy GGUF files; see the module docstring for what each one is for."""

    small: Path
    large: Path
    related: Path
    other_vocab: Path


@dataclass(frozen=True)
class Vocab:
    """A byte-level BPE vocabulary as GGUF stores it (texts in the GPT-2 unicode alphabet)."""

    tokens: list[str]
    token_types: list[int]
    merges: list[str]

    @property
    def size(self) -> int:
        return len(self.tokens)

    def id_of(self, text: str) -> int:
        return self.tokens.index(text)


@dataclass(frozen=True)
class ModelSpec:
    """Shape and random-weight recipe of one toy model."""

    name: str
    seed: int
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    context_length: int = 2048
    # Multiplies the final RMS norm, i.e. scales every logit (see module docstring).
    logit_scale: float = 2.5
    # Log-normal spread of the final norm weights over the dimensions (see `output_norm`).
    output_norm_spread: float = 1.0
    # Std of an embedding entry is embd_norm / sqrt(n_embd): rows have norm ~embd_norm
    # whatever the width, so the logit statistics do not depend on n_embd.
    embd_norm: float = 0.8
    # Log-normal spread of the embedding row norms (see `embedding`).
    row_norm_spread: float = 0.15
    # Row norm multipliers for non-ASCII/control bytes, <|im_end|>, the other control tokens.
    odd_byte_gain: float = 0.7
    eos_gain: float = 1.2
    control_gain: float = 0.5
    # Scales the query and key weights. Sharper, content-dependent attention makes each
    # step depend on more of the context; at 1.0 greedy runs fall into short loops.
    qk_gain: float = 2.0


# --- tokenizer -------------------------------------------------------------------------


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map, in GPT-2's own order.

    Printable bytes map to themselves; the others (control characters, space, ...) are
    shifted to code points from 256 up, so that every byte token is visible text.
    """
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shift)
            shift += 1
    return mapping


# Python's `re` has no \p{L}; [^\W\d_] is "letter" and \d is "number", close enough for the
# ASCII training text. Same shape as llama.cpp's "qwen2" pre-tokenizer regex, so merges
# never straddle the boundaries llama.cpp will split at.
_PRETOKENIZE = re.compile(
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    r"|(?:[^\r\n\w]|_)?[^\W\d_]+"
    r"|\d"
    r"| ?(?:[^\s\w]|_)+[\r\n]*"
    r"|\s*[\r\n]+"
    r"|\s+(?!\S)"
    r"|\s+"
)


def pretokenize(text: str) -> list[str]:
    """Split text as the qwen2 pre-tokenizer does, each piece in the byte alphabet."""
    alphabet = bytes_to_unicode()
    return ["".join(alphabet[b] for b in piece.encode()) for piece in _PRETOKENIZE.findall(text)]


def _merge_pair(symbols: list[str], pair: tuple[str, str]) -> list[str]:
    merged: list[str] = []
    i = 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


def learn_merges(text: str, n_merges: int) -> list[tuple[str, str]]:
    """Plain BPE training: repeatedly merge the most frequent adjacent pair.

    Ties break on the pair itself, so the result is deterministic.
    """
    word_counts = Counter(pretokenize(text))
    words = {word: list(word) for word in word_counts}
    merges: list[tuple[str, str]] = []
    while len(merges) < n_merges:
        pair_counts: Counter[tuple[str, str]] = Counter()
        for word, symbols in words.items():
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] += word_counts[word]
        if not pair_counts:
            break
        best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))
        merges.append(best)
        words = {word: _merge_pair(symbols, best) for word, symbols in words.items()}
    return merges


def build_vocab(text: str, n_merges: int, byte_order: Iterable[int]) -> Vocab:
    """Byte tokens (in ``byte_order``), then the learned merges, then the ChatML tokens."""
    alphabet = bytes_to_unicode()
    tokens = [alphabet[b] for b in byte_order]
    assert sorted(tokens) == sorted(alphabet.values()), "byte_order must list all 256 bytes"
    merges = learn_merges(text, n_merges)
    known = set(tokens)
    for left, right in merges:
        # Two merge paths can build the same string ("th"+"e", "t"+"he"); one token suffices.
        if left + right not in known:
            tokens.append(left + right)
            known.add(left + right)
    types = [int(gguf.TokenType.NORMAL)] * len(tokens)
    tokens += SPECIAL_TOKENS
    types += [int(gguf.TokenType.CONTROL)] * len(SPECIAL_TOKENS)
    return Vocab(tokens=tokens, token_types=types, merges=[f"{a} {b}" for a, b in merges])


def main_vocab() -> Vocab:
    """The shared vocabulary: GPT-2 byte order (``!`` is token 0), ~250 English merges."""
    return build_vocab(ENGLISH_TEXT, n_merges=250, byte_order=bytes_to_unicode())


def other_vocab() -> Vocab:
    """A different vocabulary: raw byte order, fewer merges from another text."""
    return build_vocab(OTHER_TEXT, n_merges=150, byte_order=range(256))


# --- weights ---------------------------------------------------------------------------

Tensors = dict[str, np.ndarray]


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float32)


def _odd_byte_tokens() -> set[str]:
    """Byte tokens other than printable ASCII, space, tab and newline."""
    return {c for b, c in bytes_to_unicode().items() if not (0x20 <= b < 0x7F or b in (0x09, 0x0A))}


def embedding(spec: ModelSpec, vocab: Vocab, rng: np.random.Generator) -> np.ndarray:
    """Token embedding rows (tied with the output): small, with uneven norms.

    A token's logit is its row dotted with the final hidden state, so a row's norm sets how
    often the token wins. A mild log-normal spread gives tokens different base rates (more
    spread makes a few loud tokens win everywhere and greedy runs loop on them). Some rows
    get fixed multipliers: non-ASCII and control bytes are shrunk so partial UTF-8 output
    happens but does not dominate (a greedy loop on a UTF-8 lead byte would also make
    llama-cpp-python's create_completion overrun max_tokens), <|im_end|> is tuned so EOS is
    rare but reachable, and the other control tokens are shrunk to almost never appear.
    """
    n_vocab, n_embd = vocab.size, spec.n_embd
    embd = _normal(rng, (n_vocab, n_embd), spec.embd_norm / np.sqrt(n_embd))
    gains = np.exp(spec.row_norm_spread * rng.standard_normal(n_vocab))
    odd_bytes = _odd_byte_tokens()
    for token_id, (text, token_type) in enumerate(zip(vocab.tokens, vocab.token_types)):
        if token_type == gguf.TokenType.CONTROL:
            gains[token_id] = spec.eos_gain if text == IM_END else spec.control_gain
        elif text in odd_bytes:
            gains[token_id] *= spec.odd_byte_gain
    return (embd * gains[:, None]).astype(np.float32)


def layer(spec: ModelSpec, index: int, rng: np.random.Generator, out_gain: float = 1.0) -> Tensors:
    """One Qwen2 block. ``out_gain`` scales what the block writes into the residual stream."""
    d, head_dim = spec.n_embd, spec.n_embd // spec.n_head
    d_kv = spec.n_head_kv * head_dim
    p = f"blk.{index}."
    std_in, std_ff = 1 / np.sqrt(d), 1 / np.sqrt(spec.n_ff)
    return {
        p + "attn_norm.weight": np.ones(d, np.float32),
        p + "attn_q.weight": _normal(rng, (d, d), std_in * spec.qk_gain),
        p + "attn_q.bias": _normal(rng, (d,), 0.1),
        p + "attn_k.weight": _normal(rng, (d_kv, d), std_in * spec.qk_gain),
        p + "attn_k.bias": _normal(rng, (d_kv,), 0.1),
        p + "attn_v.weight": _normal(rng, (d_kv, d), std_in),
        p + "attn_v.bias": _normal(rng, (d_kv,), 0.1),
        p + "attn_output.weight": _normal(rng, (d, d), std_in * out_gain),
        p + "ffn_norm.weight": np.ones(d, np.float32),
        p + "ffn_gate.weight": _normal(rng, (spec.n_ff, d), std_in),
        p + "ffn_up.weight": _normal(rng, (spec.n_ff, d), std_in),
        p + "ffn_down.weight": _normal(rng, (d, spec.n_ff), std_ff * out_gain),
    }


def output_norm(spec: ModelSpec, rng: np.random.Generator) -> np.ndarray:
    """Final RMS-norm weights: the logit scale, spread log-normally over the dimensions.

    The normalized hidden state has a fixed length, so with a uniform weight every position
    gets about the same logit spread. With a few heavy dimensions the effective scale
    depends on how much of the state falls on them, which differs from position to
    position: that is what makes the draft sure of some tokens and unsure of others.
    """
    gains = np.exp(spec.output_norm_spread * rng.standard_normal(spec.n_embd))
    gains /= np.sqrt(np.mean(gains**2))
    return (spec.logit_scale * gains).astype(np.float32)


def random_weights(spec: ModelSpec, vocab: Vocab) -> Tensors:
    """All tensors of a fresh model; embeddings tied, so there is no output.weight."""
    rng = np.random.default_rng(spec.seed)
    tensors: Tensors = {"token_embd.weight": embedding(spec, vocab, rng)}
    for i in range(spec.n_layer):
        tensors |= layer(spec, i, rng)
    tensors["output_norm.weight"] = output_norm(spec, rng)
    return tensors


def related_weights(
    base: Tensors, base_spec: ModelSpec, spec: ModelSpec, noise: float, extra_gain: float
) -> Tensors:
    """``base`` with relative noise on every tensor, plus weak extra layers on top.

    The extra blocks write only ``extra_gain`` of a normal block's output into the residual
    stream, so the result is a perturbed copy of the base model: it picks the base model's
    token where the base is confident and often differs where it is not.
    """
    rng = np.random.default_rng(spec.seed)
    tensors = {
        name: (t + _normal(rng, t.shape, noise * float(np.sqrt(np.mean(t * t))))).astype(np.float32)
        for name, t in base.items()
    }
    for i in range(base_spec.n_layer, spec.n_layer):
        tensors |= layer(spec, i, rng, out_gain=extra_gain)
    return tensors


# --- writing ---------------------------------------------------------------------------


def gguf_writer(path: Path, spec: ModelSpec, vocab: Vocab, q8_0: bool = False, **split) -> gguf.GGUFWriter:
    """A Qwen2 GGUF writer holding the model's metadata and tokenizer (`split`: GGUFWriter's split options)."""
    writer = gguf.GGUFWriter(path, arch="qwen2", **split)
    writer.add_name(f"cascade-toy-{spec.name}" + ("-q8_0" if q8_0 else ""))
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0 if q8_0 else gguf.LlamaFileType.ALL_F32))
    writer.add_context_length(spec.context_length)
    writer.add_embedding_length(spec.n_embd)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_block_count(spec.n_layer)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)  # llama.cpp refuses a qwen2 model without it

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    writer.add_token_merges(vocab.merges)
    # As in the Qwen2.5 instruct GGUFs: EOS is <|im_end|>, BOS/padding <|endoftext|>.
    # llama.cpp also marks <|endoftext|> as end-of-generation by its text.
    writer.add_eos_token_id(vocab.id_of(IM_END))
    writer.add_eot_token_id(vocab.id_of(IM_END))
    writer.add_bos_token_id(vocab.id_of(ENDOFTEXT))
    writer.add_pad_token_id(vocab.id_of(ENDOFTEXT))
    writer.add_add_bos_token(False)
    writer.add_chat_template(QWEN25_CHAT_TEMPLATE)
    return writer


def add_tensors(writer: gguf.GGUFWriter, tensors: Tensors, q8_0: bool = False) -> None:
    q8 = gguf.GGMLQuantizationType.Q8_0
    for name, tensor in tensors.items():
        if q8_0 and tensor.ndim == 2:
            writer.add_tensor(name, gguf.quants.quantize(tensor, q8), raw_dtype=q8)
        else:
            writer.add_tensor(name, tensor)


def write_gguf(path: Path, spec: ModelSpec, vocab: Vocab, tensors: Tensors, q8_0: bool = False) -> None:
    """Write a Qwen2 GGUF atomically: to a temporary name, then rename. With `q8_0`, every weight matrix
    is quantized to Q8_0 (norms and biases stay f32, as llama.cpp's quantizer does)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    writer = gguf_writer(tmp, spec, vocab, q8_0)
    add_tensors(writer, tensors, q8_0)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        # A reader (or a parallel test worker) sees either no file or a complete one.
        os.replace(tmp, path)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise


def write_split(path: Path, spec: ModelSpec, vocab: Vocab, tensors: Tensors, parts: int) -> list[Path]:
    """Write a model split as the Hub splits big ones: `path` names the whole ("x.gguf"), the parts are
    "x-00001-of-0000N.gguf", ... beside it (metadata and tokenizer in the first); returns them in order."""
    writer = gguf_writer(path, spec, vocab, split_max_tensors=-(-len(tensors) // parts))
    add_tensors(writer, tensors)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    names = [path.with_name(f"{path.stem}-{k:05d}-of-{parts:05d}.gguf") for k in range(1, parts + 1)]
    assert all(p.exists() for p in names), f"GGUFWriter wrote other names than {names}"
    return names


SMALL = ModelSpec(name="small", seed=1)
# At eos_gain 1.2 this seed ends greedy runs after 22-31 tokens on some prompts; at 1.0
# none of the usual test prompts ends within 200 tokens.
LARGE = ModelSpec(
    name="large", seed=2, n_embd=128, n_layer=4, n_head=8, n_head_kv=2, n_ff=256, eos_gain=1.0
)
RELATED = replace(SMALL, name="related", seed=3, n_layer=4)
OTHER = replace(SMALL, name="other-vocab", seed=4)
# Tuned so `related` picks the same greedy token as `small` (given small's prefix) on
# roughly 55% of the positions; more noise or gain lowers that.
RELATED_NOISE = 0.04
RELATED_EXTRA_GAIN = 0.2


def build_toy_models(directory: Path) -> ToyModels:
    """Write the four toy models into ``directory`` (those not there yet) and return their paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = ToyModels(
        small=directory / f"toy-small-v{RECIPE_VERSION}.gguf",
        large=directory / f"toy-large-v{RECIPE_VERSION}.gguf",
        related=directory / f"toy-related-v{RECIPE_VERSION}.gguf",
        other_vocab=directory / f"toy-other-vocab-v{RECIPE_VERSION}.gguf",
    )
    if all(p.exists() for p in (paths.small, paths.large, paths.related, paths.other_vocab)):
        return paths

    vocab = main_vocab()
    small = random_weights(SMALL, vocab)
    if not paths.small.exists():
        write_gguf(paths.small, SMALL, vocab, small)
    if not paths.large.exists():
        write_gguf(paths.large, LARGE, vocab, random_weights(LARGE, vocab))
    if not paths.related.exists():
        related = related_weights(small, SMALL, RELATED, RELATED_NOISE, RELATED_EXTRA_GAIN)
        write_gguf(paths.related, RELATED, vocab, related)
    if not paths.other_vocab.exists():
        other = other_vocab()
        write_gguf(paths.other_vocab, OTHER, other, random_weights(OTHER, other))
    return paths


# --- padding rows ----------------------------------------------------------------------
# Qwen2.5's GGUFs end their vocabulary with padding entries past the tokenizer's real tokens ("[PAD151665]", ...,
# token type UNUSED): the 0.5B-3B files have 151,936 rows, the 7B and 14B 152,064. These variants do the same to
# `small` and `large`: `small` plus SMALL_PADDING rows, `large` plus LARGE_PADDING, so the pair shares some padding
# ids and the bigger one has padding rows the other lacks. The real tokens' rows are the originals' own, so both
# write what `small` and `large` write wherever no padding id is chosen.

SMALL_PADDING = 64
LARGE_PADDING = 128
# The norm of `large`'s padding rows: 128 random directions this long in its 128 dimensions out-score every real
# token at every position, so an engine that lets padding be chosen chooses it.
LOUD_PADDING_NORM = 60.0


@dataclass(frozen=True)
class PaddedToys:
    """Paths of `small` and `large` with padding rows (see "padding rows" above)."""

    small: Path
    large: Path


def padded_vocab(vocab: Vocab, extra: int, token_type: int = int(gguf.TokenType.UNUSED)) -> Vocab:
    """`vocab` and `extra` entries after it named as Qwen2.5 names its padding ("[PAD509]", ...)."""
    names = [f"[PAD{i}]" for i in range(vocab.size, vocab.size + extra)]
    return Vocab(tokens=vocab.tokens + names, token_types=vocab.token_types + [token_type] * extra,
                 merges=vocab.merges)


def padded_weights(tensors: Tensors, extra: int, norm: float, seed: int) -> Tensors:
    """`tensors` with `extra` rows after the (tied) embedding: zero rows, or random directions of length `norm`."""
    embd = tensors["token_embd.weight"]
    rows = np.zeros((extra, embd.shape[1]), np.float32)
    if norm:
        rows = np.random.default_rng(seed).standard_normal(rows.shape).astype(np.float32)
        rows *= norm / np.linalg.norm(rows, axis=1, keepdims=True)
    return {**tensors, "token_embd.weight": np.concatenate([embd, rows]).astype(np.float32)}


def write_padded(path: Path, spec: ModelSpec, extra: int, norm: float = 0.0,
                 token_type: int = int(gguf.TokenType.UNUSED)) -> Path:
    """`spec`'s toy model with `extra` rows of `token_type` after its vocabulary, written to `path`."""
    vocab = main_vocab()
    tensors = padded_weights(random_weights(spec, vocab), extra, norm, seed=spec.seed + 100)
    write_gguf(path, replace(spec, name=f"{spec.name}-padded"), padded_vocab(vocab, extra, token_type), tensors)
    return path


def build_padded_models(directory: Path) -> PaddedToys:
    """Write `small` and `large` with padding rows into ``directory`` (those not there yet)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = PaddedToys(small=directory / f"toy-small-padded-v{RECIPE_VERSION}.gguf",
                       large=directory / f"toy-large-padded-v{RECIPE_VERSION}.gguf")
    if not paths.small.exists():
        write_padded(paths.small, SMALL, SMALL_PADDING)
    if not paths.large.exists():
        write_padded(paths.large, LARGE, LARGE_PADDING, norm=LOUD_PADDING_NORM)
    return paths
