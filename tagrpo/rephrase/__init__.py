"""Rephrasings of the training questions: templates, backends (rules, a local model, an
OpenAI-compatible endpoint), the reply cache and the rephrase stage's work."""
