"""A run's result: the dict a training command's library function returns, whose "model" entry
can be built on first use.

A run that trained on packed rows returns, as "model", an unpacked copy of the trained model
(the encoder's inputs, as callers feed it). Building that copy costs a model build and a weight
copy (seconds for a 6-layer model), which the commands never use: they report, evaluate and
export from the trained model itself. So the copy is made when a caller first reads
result["model"] (or copies the result), under the strategy and Keras dtype policy of the run
(the run's `with` blocks have ended by then). Under a multi-worker strategy the copy is made
at once, as before: creating variables there is a collective step that every worker must take
together.
"""

from typing import Any, Callable, Optional

import keras
import tensorflow as tf

from bert_tf.model import layers


class RunResult(dict):
  """dict, with a "model" entry made by copy_model's `build` the first time result["model"] is
  read (and kept from then on). Until then the entry counts as present: `in`, len, keys and
  iteration name it, get, items, values and copy build it, and so does copying the result
  (dict(result), {**result}: the mapping protocol, through keys and result[key])."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self._build_model: Optional[Callable[[], Any]] = None

  def copy_model(self, build: Callable[[], Any], strategy: tf.distribute.Strategy) -> None:
    """result["model"] becomes build()'s model: built now under a multi-worker strategy,
    otherwise when first read, under `strategy` and the dtype policy current now."""
    self.pop("model", None)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
      with strategy.scope():
        self["model"] = build()
      return
    policy = keras.config.dtype_policy()

    def build_later():
      with layers.dtype_policy(policy), strategy.scope():
        return build()
    self._build_model = build_later

  def _pending(self) -> bool:
    return self._build_model is not None

  def __contains__(self, key):
    return (key == "model" and self._pending()) or super().__contains__(key)

  def __len__(self):
    return super().__len__() + int(self._pending())

  def keys(self):
    return list(super().keys()) + (["model"] if self._pending() else [])

  def __iter__(self):
    return iter(self.keys())

  def _built(self) -> "RunResult":
    if self._pending():
      self["model"]  # pylint: disable=pointless-statement
    return self

  def get(self, key, default=None):
    return self[key] if key in self else default

  def items(self):
    return super(RunResult, self._built()).items()

  def values(self):
    return super(RunResult, self._built()).values()

  def copy(self):
    return dict(self._built())

  def __missing__(self, key):
    if key == "model" and self._build_model is not None:
      build, self._build_model = self._build_model, None
      self["model"] = build()
      return self["model"]
    raise KeyError(key)
