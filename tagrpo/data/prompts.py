"""The prompts the paper uses, shared by training, evaluation and data preparation."""

from __future__ import annotations

# Box 2 of the paper (Appendix B): appended to every question, in training and evaluation.
ANSWER_FORMAT_INSTRUCTION = (
    "Please provide step-by-step reasoning, and enclose your final answer in the box: \\boxed{}."
)

# Multiple-choice questions (GPQA-Diamond) need the options and an answer letter in the box.
MULTIPLE_CHOICE_INSTRUCTION = (
    "Please provide step-by-step reasoning, and enclose the letter of your final answer "
    "in the box: \\boxed{}."
)

# Option letters in order; GPQA-Diamond uses the first four, the mini world's multiple-choice
# benchmark up to all 26 (tagrpo.miniworld.tasks.choice_options).
CHOICE_LETTERS = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def format_question(problem: str, choices: list[str] | None = None) -> str:
    """The user-turn text: the problem (with lettered options, if any) and the instruction."""
    if choices:
        if len(choices) > len(CHOICE_LETTERS):
            raise ValueError(f"at most {len(CHOICE_LETTERS)} choices, got {len(choices)}")
        letters = CHOICE_LETTERS[: len(choices)]
        options = "\n".join(
            f"({letter}) {text}" for letter, text in zip(letters, choices, strict=True)
        )
        return f"{problem.strip()}\n\n{options}\n\n{MULTIPLE_CHOICE_INSTRUCTION}"
    return f"{problem.strip()}\n\n{ANSWER_FORMAT_INSTRUCTION}"


# The authors' instruction (lhkhiem28/TA-GRPO at 67d09b7, utils.py line 16), prepended to the
# question with a newline; their test.py sends that text to vLLM without a chat template.
# Used by ``evaluate.prompt_format: raw`` only; training keeps Box 2.
AUTHORS_INSTRUCTION = (
    "You FIRST think about the reasoning process step by step and then provide the user with "
    "the answer. Please enclose your final answer in the box: \\boxed{}. Please stop generating "
    "immediately after outputting the box."
)


def authors_prompt_text(problem: str, choices: list[str] | None = None) -> str:
    """The authors' evaluation prompt: their instruction, a newline, the question as stored.

    Lettered options (GPQA-Diamond) follow the question as in :func:`format_question`; the
    authors' own GPQA file is not public in their code, so that part is this project's.
    """
    text = problem
    if choices:
        if len(choices) > len(CHOICE_LETTERS):
            raise ValueError(f"at most {len(CHOICE_LETTERS)} choices, got {len(choices)}")
        letters = CHOICE_LETTERS[: len(choices)]
        options = "\n".join(
            f"({letter}) {option}" for letter, option in zip(letters, choices, strict=True)
        )
        text = f"{problem.strip()}\n\n{options}"
    return f"{AUTHORS_INSTRUCTION}\n{text}"


def chat_messages(problem: str, choices: list[str] | None = None) -> list[dict[str, str]]:
    """Chat messages for one question, in the ``[{"role", "content"}]`` form verl and HF use."""
    return [{"role": "user", "content": format_question(problem, choices)}]
