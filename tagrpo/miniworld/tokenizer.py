"""A small byte-level BPE tokenizer with a ChatML chat template, trained on mini-world text.

Digits are split one per token (as in Llama 3 and Qwen tokenizers) so that arithmetic is
learnable by a tiny model, a space before a digit staying with it (" 18" is " 1", "8": one
token fewer per number than a lone space); byte-level BPE decodes back to the exact text, so
graders see ``\\boxed{...}`` exactly as generated. The result is a standard
``PreTrainedTokenizerFast``, saved with ``save_pretrained``: the rest of the pipeline treats it
like any hub tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

BOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [BOS_TOKEN, IM_START, IM_END]

# ChatML, the format of SmolLM2 and Qwen models: the same chat layout as the paper-scale models.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """Train the BPE on ``texts`` and wrap it as a chat-capable HF fast tokenizer."""
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r" ?\d"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS_TOKEN,
        eos_token=IM_END,  # generation stops at the end of the assistant turn
        pad_token=IM_END,
        chat_template=CHATML_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.padding_side = "left"  # decoder-only batched generation pads on the left
    return tokenizer
