"""RunResult (bert_tf/training/run_result.py): the unpacked model copy is built when first read,
under the run's strategy and dtype policy, once."""

import keras
import pytest
import tensorflow as tf

from bert_tf.model import layers
from bert_tf.training import run_result


def test_the_copy_is_built_on_first_read_under_the_runs_policy_and_strategy():
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  built = []

  def build():
    built.append((keras.config.dtype_policy().name, tf.distribute.get_strategy() is strategy))
    return keras.layers.Dense(2)

  result = run_result.RunResult(global_step=3, model="the packed model")
  with layers.dtype_policy("mixed_bfloat16"):
    result.copy_model(build, strategy)
  assert keras.config.dtype_policy().name == "float32"
  assert built == [] and "model" in result and len(result) == 2
  model = result["model"]
  assert built == [("mixed_bfloat16", True)]
  assert keras.config.dtype_policy().name == "float32"  # restored after the build
  assert result["model"] is model and len(result) == 2 and built == [("mixed_bfloat16", True)]
  assert result["global_step"] == 3


def test_other_missing_keys_stay_missing():
  result = run_result.RunResult(a=1)
  with pytest.raises(KeyError):
    result["model"]  # pylint: disable=pointless-statement
  result.copy_model(lambda: "copy", tf.distribute.get_strategy())
  with pytest.raises(KeyError):
    result["eval_accuracy"]  # pylint: disable=pointless-statement
  assert result["model"] == "copy"


def test_copies_and_views_of_the_result_hold_the_model():
  """dict(result), {**result}, items, values, get, len and `in` see the pending entry (and all
  but `in`, len and keys build it), so a caller that copies the result loses nothing."""
  made = []

  def fresh():
    made.clear()
    result = run_result.RunResult(global_step=3)
    result.copy_model(lambda: made.append(1) or "copy", tf.distribute.get_strategy())
    return result

  result = fresh()
  assert "model" in result and len(result) == 2 and sorted(result) == ["global_step", "model"]
  assert made == []
  assert dict(fresh()) == {"global_step": 3, "model": "copy"} and made == [1]
  assert {**fresh(), "x": 1} == {"global_step": 3, "model": "copy", "x": 1} and made == [1]
  assert dict(fresh().items()) == {"global_step": 3, "model": "copy"}
  assert sorted(fresh().values(), key=str) == [3, "copy"]
  assert fresh().get("model") == "copy" and fresh().get("other", 5) == 5
  assert fresh().copy() == {"global_step": 3, "model": "copy"} and made == [1]
