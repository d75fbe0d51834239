"""A multiple-choice mini-world benchmark for tests of the multiple-choice path (chance floors,
letters, pass@1 edges): world v2's default has none (preregistration/world-v2-candidates.md)."""

MINI_CHOICE = {"size": 48, "lengths": {2: 1.0}, "multiple_choice": True, "options": 10}

# config_with overrides that add it to the default and to the ood group
WITH_MINI_CHOICE = {
    "data.synthetic.benchmarks.mini_choice": MINI_CHOICE,
    "evaluate.groups.ood": ["mini_unseen", "mini_choice"],
}
