"""model/inference.py: the serving graph against the NumPy reference and the Keras models."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import row_packing
from bert_tf.model import checkpoints, heads, inference, layers
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.classifier import head as classifier_head
from tests import helpers

CONFIG = helpers.ODD_CONFIG


def _model(build, seed=0):
  with layers.dtype_policy("float32"):
    model = build()
  weights = helpers.random_original_weights(CONFIG, np.random.default_rng(seed), heads=False)
  checkpoints.set_original_weights(model, weights, strict=False)
  return model, weights


def _inputs(rng, batch=4, seq=9):
  ids, mask, types, _ = helpers.random_inputs(CONFIG, rng, batch=batch, seq=seq)
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=types)


def test_encoder_matches_the_numpy_reference():
  model, weights = _model(lambda: classifier_head.build_classifier_model(CONFIG, 2))
  x = _inputs(np.random.default_rng(1))
  encoder = inference.InferenceEncoder(model)
  got = encoder(*[tf.constant(x[k]) for k in ("input_word_ids", "input_mask", "input_type_ids")],
                all_layers=True)
  seq, pooled, per_layer = helpers.ref_encoder(weights, CONFIG, x["input_word_ids"],
                                               x["input_mask"], x["input_type_ids"])
  real = x["input_mask"][..., None] > 0
  np.testing.assert_allclose(got["sequence_output"].numpy() * real, seq * real, atol=2e-5)
  np.testing.assert_allclose(got["pooled_output"].numpy(), pooled, atol=2e-5)
  for layer, ref in zip(got["encoder_outputs"], per_layer):
    np.testing.assert_allclose(layer.numpy() * real, ref * real, atol=2e-5)


@pytest.mark.parametrize("kind", ["classifier", "span", "tagger", "regression"])
def test_every_head_equals_the_keras_model(kind):
  builders = dict(
      classifier=lambda: classifier_head.build_classifier_model(CONFIG, 3),
      regression=lambda: classifier_head.build_classifier_model(CONFIG, None),
      span=lambda: squad_head.build_span_model(CONFIG),
      tagger=lambda: tagging_head.build_tagger_model(CONFIG, 5))
  model, _ = _model(builders[kind])
  x = _inputs(np.random.default_rng(2))
  want = model({k: tf.constant(v) for k, v in x.items()}, training=False)
  got = inference.InferenceModel(model)({k: tf.constant(v) for k, v in x.items()})
  assert sorted(got) == sorted(want)
  real = x["input_mask"] > 0
  for key, value in want.items():
    value, mine = value.numpy(), got[key].numpy()
    if value.ndim >= 2 and value.shape[1] == real.shape[1]:  # per position: the real ones
      value, mine = value[real], mine[real]
    np.testing.assert_allclose(mine, value, atol=2e-5, err_msg=key)


def test_packed_rows_give_each_example_its_own_outputs():
  model, _ = _model(lambda: tagging_head.build_tagger_model(CONFIG, 5))
  x = _inputs(np.random.default_rng(3), batch=5, seq=7)
  fast = inference.InferenceModel(model)
  packed = row_packing.pack_arrays(x, {}, 16)
  assert packed["input_word_ids"].shape[0] < 5  # several examples share a row
  got = fast({k: tf.constant(packed[k]) for k in x}, tf.constant(packed["input_position_ids"]),
             tf.constant(packed["packed_cls_positions"]))["logits"].numpy()
  alone = fast({k: tf.constant(v) for k, v in x.items()})["logits"].numpy()
  plan = row_packing.pack_plan(list(row_packing.real_lengths(x["input_mask"])), 16)
  for r, placed in enumerate(plan):
    for i, offset in placed:
      n = int(x["input_mask"][i].sum())
      np.testing.assert_allclose(got[r, offset:offset + n], alone[i, :n], atol=2e-5)


def test_bfloat16_stays_close_and_keeps_float32_outputs():
  model, _ = _model(lambda: classifier_head.build_classifier_model(CONFIG, 3))
  x = {k: tf.constant(v) for k, v in _inputs(np.random.default_rng(4)).items()}
  full = inference.InferenceModel(model)(x)["logits"].numpy()
  half = inference.InferenceModel(model, "bfloat16")(x)["logits"]
  assert half.dtype == tf.float32
  # bfloat16 keeps 8 bits of mantissa: logits of order 1 move by a few hundredths at most.
  np.testing.assert_allclose(half.numpy(), full, atol=0.1)
  assert np.abs(half.numpy() - full).max() > 0  # the matmuls really ran in bfloat16


def _kernel_constants(graph_def, shapes):
  """How many Const nodes of the graph and its library hold a tensor of one of `shapes`."""
  nodes = list(graph_def.node)
  for function in graph_def.library.function:
    nodes += function.node_def
  return sum(1 for node in nodes if node.op == "Const" and tuple(
      d.size for d in node.attr["value"].tensor.tensor_shape.dim) in shapes)


def test_bfloat16_kernels_are_constants_stored_once(tmp_path):
  model, _ = _model(lambda: classifier_head.build_classifier_model(CONFIG, 3))
  fast = inference.InferenceModel(model, "bfloat16")
  x = {k: tf.constant(v) for k, v in _inputs(np.random.default_rng(5)).items()}
  module = tf.Module()
  module.fast = fast
  spec = {k: tf.TensorSpec([None, None], tf.int32) for k in x}
  # The encoder traced twice, as a serving function's two branches trace it.
  module.run = tf.function(
      lambda inputs: tf.cond(tf.shape(inputs["input_mask"])[0] > 2,
                             lambda: fast(inputs)["logits"], lambda: fast(inputs)["logits"]),
      input_signature=[spec])
  want = module.run(x).numpy()
  tf.saved_model.save(module, str(tmp_path))
  loaded = tf.saved_model.load(str(tmp_path))
  got = loaded.run(x).numpy()
  np.testing.assert_array_equal(got, want)
  hidden, inner = CONFIG.hidden_size, CONFIG.intermediate_size
  shapes = {(hidden, 3 * hidden), (hidden, hidden), (hidden, inner), (inner, hidden)}
  graph = module.run.get_concrete_function().graph.as_graph_def()
  # Each layer's four kernels once (in the one function that returns them), not once a trace.
  assert _kernel_constants(graph, shapes) == 4 * CONFIG.num_hidden_layers
  kernel_variables = [v.name for v in fast.variables
                      if v.dtype == tf.bfloat16 and tuple(v.shape) in shapes]
  assert not kernel_variables


def test_bad_settings_are_refused():
  model, _ = _model(lambda: classifier_head.build_classifier_model(CONFIG, 3))
  with pytest.raises(ValueError, match="precision must be one of float32, bfloat16"):
    inference.InferenceModel(model, "float16")
  with pytest.raises(ValueError, match="has no output sequence_output"):
    inference.InferenceModel(model, outputs=("sequence_output",))
  with layers.dtype_policy("float32"):
    pretraining = heads.build_pretraining_model(CONFIG)
  with pytest.raises(ValueError, match="pretraining model's heads are not served"):
    inference.InferenceModel(pretraining)
