"""A KV cache for CPU sampling that grows in place instead of concatenating every step.

transformers' ``DynamicLayer`` appends each new token with ``torch.cat``, copying the whole
cache per step and layer: O(length^2) memory traffic per sequence. With the tiny mini-world
policy that copy was half of all sampling time (profiled: ``aten::cat`` 48% of a 512-sequence
batch). :class:`GrowingLayer` keeps a buffer with spare room (doubling when full) and hands
attention a view of its filled part; the values attention sees are the same, so the tokens
drawn are too (``tests/test_backend_models.py``).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer

MIN_CAPACITY = 64


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views into a preallocated buffer."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self._length = 0

    def _reserve(self, needed: int, like: torch.Tensor) -> None:
        capacity = 0 if self._key_buffer is None else self._key_buffer.shape[-2]
        if needed <= capacity:
            return
        capacity = max(needed, 2 * capacity, MIN_CAPACITY)
        shape = (*like.shape[:-2], capacity, like.shape[-1])
        keys, values = like.new_empty(shape), like.new_empty(shape)
        if self._length:
            keys[..., : self._length, :] = self._key_buffer[..., : self._length, :]
            values[..., : self._length, :] = self._value_buffer[..., : self._length, :]
        self._key_buffer, self._value_buffer = keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self._length, self._length + key_states.shape[-2]
        self._reserve(end, key_states)
        self._key_buffer[..., start:end, :] = key_states
        self._value_buffer[..., start:end, :] = value_states
        self._length = end
        self.keys = self._key_buffer[..., :end, :]
        self.values = self._value_buffer[..., :end, :]
        return self.keys, self.values

    def _rebuild(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self._key_buffer = self._value_buffer = None
        self._length = 0
        self.update(keys, values)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized and self._length:
            self._rebuild(
                self.keys.repeat_interleave(repeats, dim=0),
                self.values.repeat_interleave(repeats, dim=0),
            )

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized and self._length:
            self._rebuild(self.keys[indices, ...], self.values[indices, ...])

    def crop(self, max_length: int) -> None:
        if not self.is_initialized:
            return
        if max_length < 0:
            max_length = self._length - abs(max_length)
        if self._length > max_length:
            self._length = max(max_length, 0)
            self.keys = self._key_buffer[..., : self._length, :]
            self.values = self._value_buffer[..., : self._length, :]


def sampling_cache(config: PretrainedConfig) -> DynamicCache:
    """A cache for ``config``'s model: :class:`GrowingLayer` layers where every layer is a
    full-attention ``DynamicLayer``; transformers' own layers otherwise (sliding-window and
    shared-KV layers keep their logic). Either way the tokens drawn are the same.
    """
    cache = DynamicCache(config=config)
    if cache.layers and all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache
