"""The intermediate distillation losses in a task's step (training/distillation/features.py):
what the feature models expose, the step's total loss against NumPy, packed rows against
unpacked ones, and the plan's one-line errors. The losses themselves are tested against NumPy in
test_distillation.py; here their wiring is.
"""

import types

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.model import encoder
from bert_tf.tasks.classifier import loss as classifier
from bert_tf.training.distillation import features
from bert_tf.training.distillation import intermediate
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.classifier import head as classifier_head
from tests.helpers import tiny_config
from tests.training.test_distillation import (B, INPUT_MASK, REAL, S, _log_softmax, _normal,
                                              _relation_kl_reference)

# Wide initial weights: attention far from uniform, so the relation losses are not ~0.
STUDENT = tiny_config(hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=12, initializer_range=0.5)
TEACHER = tiny_config(hidden_size=12, num_hidden_layers=3, num_attention_heads=2,
                      intermediate_size=16, initializer_range=0.5)


def _settings(**changes):
  values = dict(distill_hidden_weight=0.0, distill_attention_weight=0.0,
                distill_value_weight=0.0, distill_layer_map="uniform",
                distill_relation_heads=None)
  values.update(changes)
  return types.SimpleNamespace(**values)


def _inputs(rng, batch=B, seq=S, mask=INPUT_MASK):
  return dict(input_word_ids=rng.integers(5, 60, (batch, seq)).astype(np.int32),
              input_mask=(mask != 0).astype(np.int32),
              input_type_ids=np.zeros((batch, seq), np.int32))


# === The plan ===


def test_plan_turns_on_what_has_a_weight_and_checks_both_models():
  plan = features.plan(_settings(distill_hidden_weight=2.0), STUDENT, TEACHER)
  assert plan.layer_map == ((1, 2), (2, 3)) and plan.projected and not plan.qkv
  assert plan.relation_heads is None
  plan = features.plan(_settings(distill_value_weight=1.0), STUDENT, TEACHER)
  assert plan.layer_map == () and plan.qkv and plan.relation_heads == 2
  assert not plan.projected and plan.on
  assert not features.plan(_settings(), STUDENT, TEACHER).on
  same = features.plan(_settings(distill_hidden_weight=1.0, distill_layer_map="last"),
                       TEACHER, TEACHER)
  assert same.layer_map == ((3, 3),) and not same.projected
  with pytest.raises(ValueError, match=r"^--distill_layer_map: teacher layer 4 in '2:4' is out "
                     r"of range 1\.\.3"):
    features.plan(_settings(distill_hidden_weight=1.0, distill_layer_map="1:1,2:4"), STUDENT,
                  TEACHER)
  # The layer map is not read when the hidden loss is off.
  features.plan(_settings(distill_attention_weight=1.0, distill_layer_map="9:9"), STUDENT,
                TEACHER)
  with pytest.raises(ValueError, match=r"^--distill_relation_heads=3 must divide both hidden "
                     r"sizes: the student's 8 and the teacher's 12$"):
    features.plan(_settings(distill_attention_weight=1.0, distill_relation_heads=3), STUDENT,
                  TEACHER)
  with pytest.raises(ValueError, match=r"the student's num_attention_heads; give "
                     r"--distill_relation_heads"):
    features.plan(_settings(distill_attention_weight=1.0), STUDENT.replace(
        num_attention_heads=8), TEACHER)


# === What the models expose ===


def test_feature_model_exposes_every_position_of_the_layers_and_the_last_qkv():
  """A classifier's last layer computes [CLS] alone for its head: its feature model still gives
  that layer at every position, equal to the encoder's, and the last layer's q, k, v; the
  classifier's own outputs are unchanged and the weights are shared, not copied."""
  tf.keras.utils.set_random_seed(1)
  model = classifier_head.build_classifier_model(STUDENT, 3)
  plain = encoder.build_encoder(STUDENT)
  checkpoints.set_original_weights(plain, checkpoints.get_original_weights(model))
  view = features.feature_model(model, [1, 2], qkv=True)
  assert len(view.trainable_variables) == len(model.trainable_variables)
  assert {id(v) for v in view.trainable_variables} == {id(v) for v in model.trainable_variables}
  inputs = _inputs(np.random.default_rng(0))
  got, reference = view(inputs), plain(inputs)
  np.testing.assert_allclose(got["logits"], model(inputs)["logits"], rtol=1e-5, atol=1e-6)
  for layer in (1, 2):
    np.testing.assert_allclose(got[features.HIDDEN.format(layer)],
                               reference["encoder_outputs"][layer - 1], rtol=1e-5, atol=1e-5)
  attention = plain.get_layer("layer_1").attention
  below = reference["encoder_outputs"][0].numpy()
  for name, dense in ((features.QUERY, attention.query), (features.KEY, attention.key),
                      (features.VALUE, attention.value)):
    kernel, bias = (w.numpy() for w in dense.weights)
    np.testing.assert_allclose(got[name], below @ kernel + bias, rtol=1e-5, atol=1e-5)
  assert set(model.output) == {"logits"}  # the model itself gained nothing


# === The step's loss ===


def test_the_steps_loss_is_the_distilled_loss_plus_the_weighted_intermediate_losses():
  """loss = alpha hard + (1 - alpha) T^2 soft (per example over the batch) + w_h hidden +
  w_a attention + w_v value (each over the real positions of the batch), against NumPy."""
  rng = np.random.default_rng(5)
  alpha, temperature, weights = 0.3, 2.0, dict(hidden_weight=0.7, attention_weight=0.4,
                                               value_weight=1.5)
  plan = features.Plan(layer_map=((1, 2), (2, 3)), relation_heads=2, student_width=8,
                       teacher_width=8, **weights)
  student, teacher = {"logits": _normal(rng, B, 3)}, {"logits": _normal(rng, B, 3)}
  for layer in (1, 2):
    student[features.HIDDEN.format(layer)] = _normal(rng, B, S, 8, scale=1.0)
  for layer in (2, 3):
    teacher[features.HIDDEN.format(layer)] = _normal(rng, B, S, 8, scale=1.0)
  for name in (features.QUERY, features.KEY, features.VALUE):
    student[name], teacher[name] = _normal(rng, B, S, 8), _normal(rng, B, S, 8)
  labels = np.array([0, 2, 1], np.int32)
  # The base reads the teacher the step computed once (features.TEACHER_OUTPUTS).
  base = classifier.distillation_task(lambda batch: batch[features.TEACHER_OUTPUTS],
                                      temperature, alpha)
  task = features.distilled_task(base, lambda batch: {k: tf.constant(v)
                                                      for k, v in teacher.items()}, plan)
  batch = {"input_ids": tf.constant(_inputs(rng)["input_word_ids"]),
           "input_mask": tf.constant(INPUT_MASK), "segment_ids": tf.zeros([B, S], tf.int32),
           "label_ids": tf.constant(labels), "is_real_example": tf.ones([B], tf.int32)}
  normalizers = task.normalizers(batch)
  assert float(normalizers[features.POSITIONS]) == REAL.sum()
  loss, sums = task.replica_loss({k: tf.constant(v) for k, v in student.items()}, batch,
                                 normalizers, B)
  hard = -_log_softmax(student["logits"].astype(np.float64))[np.arange(B), labels]
  soft = -(np.exp(_log_softmax(teacher["logits"] / temperature))
           * _log_softmax(student["logits"] / temperature)).sum(-1) * temperature ** 2
  hidden = sum(((student[features.HIDDEN.format(s)].astype(np.float64)
                 - teacher[features.HIDDEN.format(t)]) ** 2).mean(-1)
               for s, t in plan.layer_map)
  attention = _relation_kl_reference(student[features.QUERY], student[features.KEY],
                                     teacher[features.QUERY], teacher[features.KEY], 2)
  value = _relation_kl_reference(student[features.VALUE], student[features.VALUE],
                                 teacher[features.VALUE], teacher[features.VALUE], 2)
  per_position = {"hidden_loss": (REAL * hidden).sum() / REAL.sum(),
                  "attention_loss": (REAL * attention).sum() / REAL.sum(),
                  "value_loss": (REAL * value).sum() / REAL.sum()}
  expected = ((alpha * hard + (1 - alpha) * soft).sum() / B
              + 0.7 * per_position["hidden_loss"] + 0.4 * per_position["attention_loss"]
              + 1.5 * per_position["value_loss"])
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  for name, value_ in per_position.items():
    assert float(sums[name]) == pytest.approx(value_, rel=1e-5), name
  assert set(task.sum_names) == set(base.sum_names) | set(per_position)
  metrics = task.train_metrics({**{k: float(v) for k, v in sums.items()}, "loss": float(loss)},
                               1)
  assert metrics["value_loss"] == pytest.approx(per_position["value_loss"], rel=1e-5)


def _packed_pair(model_fn, config, seed):
  """The model unpacked and packed, with the same weights."""
  tf.keras.utils.set_random_seed(seed)
  unpacked = model_fn(config, packed=False)
  packed = model_fn(config, packed=True)
  checkpoints.set_original_weights(packed, checkpoints.get_original_weights(unpacked))
  return unpacked, packed


def test_packed_rows_give_the_unpacked_intermediate_losses():
  """Three examples (lengths 5, 3, 2), one a row, or packed two rows (the second holding two
  examples): each intermediate loss over the real positions is the same, projection included."""
  classifier_model = lambda config, packed: classifier_head.build_classifier_model(config, 3,
                                                                         packed=packed)
  student, student_packed = _packed_pair(classifier_model, STUDENT, 2)
  teacher, teacher_packed = _packed_pair(classifier_model, TEACHER, 3)
  plan = features.plan(_settings(distill_hidden_weight=1.0, distill_attention_weight=1.0,
                                 distill_value_weight=1.0), STUDENT, TEACHER)
  build = features.student_step_model(plan, 0.02)
  view, holder = build(student)
  projection = holder.projection
  projection.bias.assign(np.random.default_rng(4).standard_normal(
      projection.bias.shape).astype(np.float32))
  # The packed student shares the projection (one set of weights, two graphs).
  view_packed = features.feature_model(student_packed, [1, 2], True, projection)
  teacher_view = features.teacher_feature_model(plan, teacher)
  teacher_view_packed = features.teacher_feature_model(plan, teacher_packed)
  rng = np.random.default_rng(6)
  lengths = (5, 3, 2)
  ids = [rng.integers(5, 60, n).astype(np.int32) for n in lengths]
  unpacked = {"input_word_ids": np.zeros((3, 5), np.int32), "input_mask": np.zeros((3, 5),
                                                                                  np.int32),
              "input_type_ids": np.zeros((3, 5), np.int32)}
  for row, example in enumerate(ids):
    unpacked["input_word_ids"][row, :len(example)] = example
    unpacked["input_mask"][row, :len(example)] = 1
  packed = {"input_word_ids": np.array([list(ids[0]), list(ids[1]) + list(ids[2])], np.int32),
            "input_mask": np.array([[1] * 5, [1, 1, 1, 2, 2]], np.int32),
            "input_type_ids": np.zeros((2, 5), np.int32),
            "input_position_ids": np.array([[0, 1, 2, 3, 4], [0, 1, 2, 0, 1]], np.int32),
            "packed_cls_positions": np.array([[0] * 8, [0, 3] + [0] * 6], np.int32)}

  def losses(view_, teacher_view_, inputs):
    values = features.intermediate_losses(plan, view_(inputs), teacher_view_(inputs),
                                          inputs["input_mask"])
    return {name: float(tf.reduce_sum(v)) / 10 for name, v in values.items()}

  one_a_row = losses(view, teacher_view, unpacked)
  two_rows = losses(view_packed, teacher_view_packed, packed)
  assert set(one_a_row) == {"hidden_loss", "attention_loss", "value_loss"}
  for name, value in one_a_row.items():
    assert value > 1e-3 and two_rows[name] == pytest.approx(value, rel=1e-4), name


def test_a_projection_is_built_only_when_the_widths_differ():
  model = tagging_head.build_tagger_model(TEACHER, 4)
  same = features.plan(_settings(distill_hidden_weight=1.0), TEACHER, TEACHER)
  view, holder = features.student_step_model(same, 0.02)(model)
  assert holder is None and len(view.trainable_variables) == len(model.trainable_variables)
  small = tagging_head.build_tagger_model(STUDENT, 4)
  wider = features.plan(_settings(distill_hidden_weight=1.0, distill_layer_map="2:3"), STUDENT,
                        TEACHER)
  view, holder = features.student_step_model(wider, 0.02)(small)
  assert isinstance(holder.projection, intermediate.HiddenProjection)
  assert holder.projection.kernel.shape == (1, 8, 12)
  # The student's variables in its own order, then the projection's (the optimizer's slots).
  assert [id(v) for v in view.trainable_variables] == [
      id(v) for v in small.trainable_variables + [holder.projection.kernel,
                                                   holder.projection.bias]]
  out = view(_inputs(np.random.default_rng(0)))
  assert out[features.HIDDEN.format(2)].shape == (B, S, 12)
