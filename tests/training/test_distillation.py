"""Tests of bert_tf.training.distillation's losses against NumPy references (float64).

Tiny odd shapes (batch 3, sequence 7, hidden 10 and 6, 2 heads, 5 classes) so that a
transposed axis shows; every mask is checked by changing what it hides.
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

from bert_tf.model import layers
from bert_tf.training import losses
from bert_tf.training.distillation import intermediate
from bert_tf.training.distillation import predictions

B, S, C, HS, HT, N = 3, 7, 5, 10, 6, 2
# Row 0 full, row 1 with padding, row 2 two packed examples (slots 1 and 2) and padding.
INPUT_MASK = np.array([[1] * 7, [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 2, 2, 0, 0]], np.int32)
REAL = (INPUT_MASK != 0).astype(np.float64)


def _rng(seed=0):
  return np.random.default_rng(seed)


def _normal(rng, *shape, scale=2.0):
  return (rng.standard_normal(shape) * scale).astype(np.float32)


def _log_softmax(x, axis=-1):
  x = np.asarray(x, np.float64)
  x = x - x.max(axis=axis, keepdims=True)
  return x - np.log(np.exp(x).sum(axis=axis, keepdims=True))


def _soft_ce(student, teacher, t, keep=None):
  """T^2 * -sum softmax(teacher/T) log softmax(student/T), over the kept classes only."""
  student, teacher = np.asarray(student, np.float64), np.asarray(teacher, np.float64)
  if keep is None:
    keep = np.ones(student.shape, bool)
  keep = np.broadcast_to(np.asarray(keep, bool), student.shape)
  out = np.zeros(student.shape[:-1])
  for index in np.ndindex(*student.shape[:-1]):
    k = keep[index]
    p = np.exp(_log_softmax(teacher[index][k] / t))
    out[index] = -(p * _log_softmax(student[index][k] / t)).sum() * t * t
  return out


def _nll(logits, labels):
  return -np.take_along_axis(_log_softmax(logits), np.asarray(labels)[..., None], -1)[..., 0]


def _close(got, expected, rtol=1e-5, atol=1e-5):
  got = tf.convert_to_tensor(got)
  assert got.dtype == tf.float32
  np.testing.assert_allclose(got.numpy(), expected, rtol=rtol, atol=atol)


# === Soft cross-entropy and the classifier ===


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.5])
def test_soft_cross_entropy_matches_the_formula_with_t_squared(temperature):
  rng = _rng(1)
  student, teacher = _normal(rng, B, C), _normal(rng, B, C)
  _close(predictions.soft_cross_entropy(student, teacher, temperature),
         _soft_ce(student, teacher, temperature))


def test_soft_cross_entropy_is_t_squared_times_the_plain_one_on_scaled_logits():
  rng = _rng(2)
  student, teacher = _normal(rng, B, C), _normal(rng, B, C)
  plain = predictions.soft_cross_entropy(student / 3.0, teacher / 3.0, 1.0).numpy()
  _close(predictions.soft_cross_entropy(student, teacher, 3.0), 9.0 * plain)
  # Its minimum over the student is the teacher's entropy * T^2 (the student equal to it).
  p = np.exp(_log_softmax(teacher / 3.0))
  _close(predictions.soft_cross_entropy(teacher, teacher, 3.0),
         -9.0 * (p * np.log(p)).sum(-1))


def test_soft_cross_entropy_class_mask_excludes_classes():
  rng = _rng(3)
  student, teacher = _normal(rng, B, C), _normal(rng, B, C)
  keep = np.array([[1, 1, 1, 0, 1], [1, 0, 0, 1, 1], [1, 1, 1, 1, 1]], np.int32)
  got = predictions.soft_cross_entropy(student, teacher, 2.0, keep)
  _close(got, _soft_ce(student, teacher, 2.0, keep))
  student2, teacher2 = student.copy(), teacher.copy()
  student2[keep == 0] = 50.0
  teacher2[keep == 0] = -50.0
  _close(predictions.soft_cross_entropy(student2, teacher2, 2.0, keep), got.numpy())


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_classifier_loss_mixes_hard_and_soft(alpha):
  rng = _rng(4)
  student, teacher = _normal(rng, B, C), _normal(rng, B, C)
  labels = np.array([4, 0, 2])
  expected = alpha * _nll(student, labels) + (1 - alpha) * _soft_ce(student, teacher, 2.5)
  _close(predictions.classifier_loss(student, teacher, labels[:, None], 2.5, alpha), expected)


def test_classifier_alpha_extremes():
  rng = _rng(5)
  student, teacher, other = _normal(rng, B, C), _normal(rng, B, C), _normal(rng, B, C)
  labels = np.array([1, 3, 0])
  # alpha = 1: the task's own loss, the teacher plays no part.
  hard = predictions.classifier_loss(student, teacher, labels, 2.0, 1.0)
  np.testing.assert_array_equal(hard.numpy(), losses.sparse_nll(student, labels).numpy())
  np.testing.assert_array_equal(
      predictions.classifier_loss(student, other, labels, 2.0, 1.0).numpy(), hard.numpy())
  # alpha = 0: soft targets only; no labels needed (data without labels).
  soft = predictions.classifier_loss(student, teacher, None, 2.0, 0.0)
  _close(soft, _soft_ce(student, teacher, 2.0))
  # hard_weights drop the hard term of unlabelled examples.
  weights = np.array([1.0, 0.0, 1.0], np.float32)
  mixed = predictions.classifier_loss(student, teacher, labels, 2.0, 0.5, weights)
  _close(mixed, 0.5 * weights * _nll(student, labels) + 0.5 * _soft_ce(student, teacher, 2.0))


@pytest.mark.parametrize("bad", [dict(temperature=0.0), dict(temperature=-1.0),
                                 dict(alpha=-0.1), dict(alpha=1.5)])
def test_bad_temperature_or_alpha_is_an_error(bad):
  args = dict(temperature=2.0, alpha=0.5)
  args.update(bad)
  with pytest.raises(ValueError, match="temperature|alpha"):
    predictions.classifier_loss(np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32),
                                [0], **args)


@pytest.mark.parametrize("alpha", [0.0, 0.25, 1.0])
def test_regression_loss(alpha):
  rng = _rng(6)
  student, teacher, gold = _normal(rng, B, 1), _normal(rng, B), _normal(rng, B)
  s = student[:, 0].astype(np.float64)
  expected = alpha * (s - gold) ** 2 + (1 - alpha) * (s - teacher) ** 2
  _close(predictions.regression_loss(student, teacher, gold if alpha else None, alpha), expected)


# === The tagger and SQuAD ===


@pytest.mark.parametrize("alpha", [0.0, 0.4, 1.0])
def test_tagger_loss_counts_the_labelled_positions_only(alpha):
  rng = _rng(7)
  student, teacher = _normal(rng, B, S, C), _normal(rng, B, S, C)
  labels = rng.integers(0, C, (B, S))
  # First pieces only: padding and the other pieces of a word weigh 0.
  label_mask = np.array([[1, 1, 0, 1, 0, 1, 1], [1, 0, 1, 1, 0, 0, 0], [1, 1, 1, 0, 1, 0, 0]],
                        np.float32)
  expected = label_mask * (alpha * _nll(student, labels)
                           + (1 - alpha) * _soft_ce(student, teacher, 2.0))
  got = predictions.tagger_loss(student, teacher, labels, label_mask, 2.0, alpha)
  _close(got, expected)
  hidden = label_mask == 0
  student2, teacher2, labels2 = student.copy(), teacher.copy(), labels.copy()
  student2[hidden] = 30.0
  teacher2[hidden] = -7.0
  labels2[hidden] = 0
  np.testing.assert_array_equal(
      predictions.tagger_loss(student2, teacher2, labels2, label_mask, 2.0, alpha).numpy(),
      got.numpy())
  if alpha == 1.0:  # the tagger's own loss: masked_lm_sums' nll (tasks/tagging.py)
    own = losses.masked_lm_sums(student, labels, label_mask)["nll"]
    np.testing.assert_allclose(tf.reduce_sum(got).numpy(), own.numpy(), rtol=1e-6)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_span_loss_averages_start_and_end(alpha):
  rng = _rng(8)
  ss, se, ts, te = (_normal(rng, B, S) for _ in range(4))
  starts, ends = np.array([0, 3, 2]), np.array([0, 5, 4])
  t = 3.0
  expected = (alpha * (_nll(ss, starts) + _nll(se, ends))
              + (1 - alpha) * (_soft_ce(ss, ts, t) + _soft_ce(se, te, t))) / 2
  got = predictions.span_loss(ss, se, ts, te, starts[:, None], ends, t, alpha)
  _close(got, expected)


def test_span_loss_position_mask():
  rng = _rng(9)
  ss, se, ts, te = (_normal(rng, B, S) for _ in range(4))
  starts, ends = np.array([1, 3, 2]), np.array([2, 3, 4])
  keep = REAL.astype(np.float32)
  expected = np.zeros(B)
  for b in range(B):
    k = keep[b] > 0
    expected[b] = (0.5 * (_nll(ss[b][k], starts[b]) + _nll(se[b][k], ends[b]))
                   + 0.5 * (_soft_ce(ss[b][k], ts[b][k], 2.0) + _soft_ce(se[b][k], te[b][k], 2.0))
                   ) / 2
  got = predictions.span_loss(ss, se, ts, te, starts, ends, 2.0, 0.5, position_mask=keep)
  _close(got, expected)
  ss[keep == 0], te[keep == 0] = 40.0, 40.0
  _close(predictions.span_loss(ss, se, ts, te, starts, ends, 2.0, 0.5, position_mask=keep),
         got.numpy())


# === Pretraining: soft masked LM and cosine ===


def test_masked_lm_soft_loss_weights_the_slots():
  rng = _rng(10)
  p, v = 4, 11
  student, teacher = _normal(rng, B, p, v), _normal(rng, B, p, v)
  weights = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], np.float32)
  got = predictions.masked_lm_soft_loss(student, teacher, weights, 2.0)
  _close(got, weights * _soft_ce(student, teacher, 2.0))
  student[weights == 0] = 9.0
  _close(predictions.masked_lm_soft_loss(student, teacher, weights, 2.0), got.numpy())


def test_cosine_loss_over_real_positions():
  rng = _rng(11)
  student, teacher = _normal(rng, B, S, HS), _normal(rng, B, S, HS)
  s, t = student.astype(np.float64), teacher.astype(np.float64)
  cosine = (s * t).sum(-1) / np.linalg.norm(s, axis=-1) / np.linalg.norm(t, axis=-1)
  got = predictions.cosine_loss(student, teacher, INPUT_MASK)
  _close(got, REAL * (1 - cosine))
  student[INPUT_MASK == 0] = 0.0  # an all-zero state at padding stays finite and weighs 0
  _close(predictions.cosine_loss(student, teacher, INPUT_MASK), got.numpy())
  _close(predictions.cosine_loss(teacher * 3.0, teacher, INPUT_MASK), np.zeros((B, S)))
  with pytest.raises(ValueError, match="one width"):
    predictions.cosine_loss(student, teacher[..., :HT], INPUT_MASK)


# === The layer map ===


@pytest.mark.parametrize("value, student, teacher, expected", [
    ("uniform", 3, 12, [(1, 4), (2, 8), (3, 12)]),
    ("uniform", 3, 6, [(1, 2), (2, 4), (3, 6)]),
    ("Uniform", 5, 12, [(1, 2), (2, 5), (3, 7), (4, 10), (5, 12)]),  # round(2.4) .. round(9.6)
    ("uniform", 4, 4, [(1, 1), (2, 2), (3, 3), (4, 4)]),
    ("last", 3, 12, [(3, 12)]),
    (" 1:2, 3:6 ", 3, 6, [(1, 2), (3, 6)]),
    ("2:1,1:1", 2, 1, [(2, 1), (1, 1)]),
])
def test_parse_layer_map(value, student, teacher, expected):
  assert intermediate.parse_layer_map(value, student, teacher) == expected


@pytest.mark.parametrize("value, student, teacher, message", [
    ("", 3, 6, "--distill_layer_map is empty"),
    ("uniform", 6, 3, "--distill_layer_map=uniform needs a student with at most the teacher's "
                      "layers (student 6, teacher 3)"),
    ("1-2", 3, 6, "--distill_layer_map: '1-2' is not a pair student:teacher"),
    ("1:2,first", 3, 6, "--distill_layer_map: 'first' is not a pair"),
    ("1:2:3", 3, 6, "'1:2:3' is not a pair"),
    ("0:2", 3, 6, "--distill_layer_map: student layer 0 in '0:2' is out of range 1..3"),
    ("3:7", 3, 6, "--distill_layer_map: teacher layer 7 in '3:7' is out of range 1..6"),
    ("2:4,2:5", 3, 6, "--distill_layer_map: student layer 2 is mapped twice ('2:4' and '2:5')"),
    ("1:-2", 3, 6, "'1:-2' is not a pair"),
])
def test_layer_map_errors_name_the_flag(value, student, teacher, message):
  with pytest.raises(ValueError) as error:
    intermediate.parse_layer_map(value, student, teacher)
  assert message in str(error.value)
  assert "\n" not in str(error.value)


# === Hidden states through a projection ===


def _states(rng, layers_count, width):
  return [_normal(rng, B, S, width, scale=1.0) for _ in range(layers_count)]


def test_hidden_state_mse_through_a_projection():
  rng = _rng(12)
  student, teacher = _states(rng, 3, HS), _states(rng, 4, HT)
  layer_map = [(1, 2), (3, 4)]
  projection = intermediate.HiddenProjection(HT, num_pairs=2)
  got = intermediate.hidden_state_mse(student, teacher, layer_map, INPUT_MASK, projection)
  kernel, bias = (w.numpy().astype(np.float64) for w in (projection.kernel, projection.bias))
  assert kernel.shape == (2, HS, HT) and bias.shape == (2, HT)
  bias = bias + _normal(rng, 2, HT)  # a bias that is not zero takes part too
  projection.bias.assign(bias)
  got = intermediate.hidden_state_mse(student, teacher, layer_map, INPUT_MASK, projection)
  expected = sum(((student[s - 1] @ kernel[i] + bias[i] - teacher[t - 1]) ** 2).mean(-1)
                 for i, (s, t) in enumerate(layer_map))
  _close(got, REAL * expected)
  student[0][INPUT_MASK == 0] = 100.0
  _close(intermediate.hidden_state_mse(student, teacher, layer_map, INPUT_MASK, projection),
         got.numpy())


def test_hidden_state_mse_shared_projection_and_equal_widths():
  rng = _rng(13)
  student, teacher = _states(rng, 2, HS), _states(rng, 4, HS)
  shared = intermediate.HiddenProjection(HS)
  got = intermediate.hidden_state_mse(student, teacher, [(1, 2), (2, 4)], INPUT_MASK, shared)
  kernel = shared.kernel.numpy()[0].astype(np.float64)
  expected = sum(((student[s - 1] @ kernel - teacher[t - 1]) ** 2).mean(-1)
                 for s, t in [(1, 2), (2, 4)])
  _close(got, REAL * expected)
  # Equal widths need no projection.
  direct = intermediate.hidden_state_mse(student, teacher, [(2, 4)], INPUT_MASK)
  _close(direct, REAL * ((student[1] - teacher[3]).astype(np.float64) ** 2).mean(-1))


def test_hidden_state_mse_errors():
  rng = _rng(14)
  student, teacher = _states(rng, 2, HS), _states(rng, 3, HT)
  with pytest.raises(ValueError, match="width 10 but teacher layer 3 has 6: give a "
                                       "HiddenProjection"):
    intermediate.hidden_state_mse(student, teacher, [(2, 3)], INPUT_MASK)
  with pytest.raises(ValueError, match="outside the student's 2 and the teacher's 3 layers"):
    intermediate.hidden_state_mse(student, teacher, [(3, 3)], INPUT_MASK)
  with pytest.raises(ValueError, match="has 2 maps but got 1 hidden states"):
    intermediate.hidden_state_mse(student, teacher, [(2, 3)], INPUT_MASK,
                                  intermediate.HiddenProjection(HT, num_pairs=2))


def test_projection_saves_and_reloads(tmp_path):
  inputs = [keras.Input((None, HS)), keras.Input((None, HS))]
  projection = intermediate.HiddenProjection(HT, num_pairs=2, initializer_range=0.5,
                                             name="distill_projection")
  model = keras.Model(inputs, projection(inputs))
  path = str(tmp_path / "projection.keras")
  model.save(path)
  reloaded = keras.models.load_model(path)
  layer = reloaded.get_layer("distill_projection")
  assert isinstance(layer, intermediate.HiddenProjection)
  assert (layer.teacher_hidden_size, layer.num_pairs, layer.initializer_range) == (HT, 2, 0.5)
  rng = _rng(15)
  x = [_normal(rng, B, S, HS), _normal(rng, B, S, HS)]
  for a, b in zip(model(x), reloaded(x)):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  again = intermediate.HiddenProjection.from_config(projection.get_config())
  assert again.get_config() == projection.get_config()


# === MiniLM: attention and value relations ===


def _visible_keys(b, q):
  """Keys the query (b, q) sees: the real keys of its own example; a padding query sees every
  real key (as PackedAttentionMask), though it is never counted."""
  slot = INPUT_MASK[b, q]
  real = INPUT_MASK[b] != 0
  return real & (INPUT_MASK[b] == slot) if slot else real


def _relation_kl_reference(sx, sy, tx, ty, heads):
  """Per-query KL(teacher || student) of softmax(x y^T / sqrt(d)) over the visible keys only,
  mean over heads; 0 at padding queries."""
  out = np.zeros((B, S))

  def log_probs(x, y, b, q, h, keys):
    d = x.shape[-1] // heads
    xs, ys = x[b, q, h * d:(h + 1) * d], y[b][:, h * d:(h + 1) * d][keys]
    return _log_softmax(ys.astype(np.float64) @ xs.astype(np.float64) / np.sqrt(d))

  for b in range(B):
    for q in range(S):
      if not INPUT_MASK[b, q]:
        continue
      keys = _visible_keys(b, q)
      kls = []
      for h in range(heads):
        t, s = log_probs(tx, ty, b, q, h, keys), log_probs(sx, sy, b, q, h, keys)
        kls.append((np.exp(t) * (t - s)).sum())
      out[b, q] = np.mean(kls)
  return out


def test_attention_transfer_loss_matches_the_reference():
  rng = _rng(16)
  sq, sk = _normal(rng, B, S, HS), _normal(rng, B, S, HS)
  tq, tk = _normal(rng, B, S, HT), _normal(rng, B, S, HT)
  got = intermediate.attention_transfer_loss(sq, sk, tq, tk, INPUT_MASK, N)
  _close(got, _relation_kl_reference(sq, sk, tq, tk, N), rtol=1e-4, atol=1e-5)
  assert got.numpy()[INPUT_MASK == 0].tolist() == [0.0] * int((INPUT_MASK == 0).sum())
  # A teacher twice as wide with the same distributions gives 0: only the [S, S] relations
  # are compared. Its head h is the student's head h and as many zeros, the query scaled by
  # sqrt(2) so that q k / sqrt(head size) is unchanged.
  d = HS // N
  zeros = np.zeros((B, S, d), np.float32)
  wide = lambda x, scale: np.concatenate(
      [part for h in range(N) for part in (x[..., h * d:(h + 1) * d] * scale, zeros)], -1)
  tq2, tk2 = wide(sq, np.sqrt(2.0)), wide(sk, 1.0)
  assert tq2.shape[-1] == 2 * HS
  _close(intermediate.attention_transfer_loss(sq, sk, tq2, tk2, INPUT_MASK, N),
         np.zeros((B, S)), atol=2e-6)


def test_value_relation_loss_matches_the_reference():
  rng = _rng(17)
  sv, tv = _normal(rng, B, S, HS), _normal(rng, B, S, HT)
  got = intermediate.value_relation_loss(sv, tv, INPUT_MASK, N)
  _close(got, _relation_kl_reference(sv, sv, tv, tv, N), rtol=1e-4, atol=1e-5)
  _close(intermediate.value_relation_loss(sv, sv * 1.0, INPUT_MASK, N), np.zeros((B, S)))


def test_relations_ignore_padding_and_other_examples_of_a_packed_row():
  rng = _rng(18)
  sq, sk, tq, tk = (_normal(rng, B, S, HS) for _ in range(4))
  got = intermediate.attention_transfer_loss(sq, sk, tq, tk, INPUT_MASK, N).numpy()
  # Padding positions' queries and keys: nothing changes.
  for x in (sq, sk, tq, tk):
    x[INPUT_MASK == 0] = _normal(rng, int((INPUT_MASK == 0).sum()), HS, scale=5.0)
  again = intermediate.attention_transfer_loss(sq, sk, tq, tk, INPUT_MASK, N).numpy()
  np.testing.assert_allclose(again, got, rtol=1e-5, atol=1e-6)
  # Row 2's second example: one of its keys changes, the first example's positions do not
  # (changing all its keys alike would shift every score of a query alike: no change).
  sk[2, 4] += 3.0
  changed = intermediate.attention_transfer_loss(sq, sk, tq, tk, INPUT_MASK, N).numpy()
  np.testing.assert_allclose(changed[2, :3], got[2, :3], rtol=1e-5, atol=1e-6)
  assert np.abs(changed[2, 3:5] - got[2, 3:5]).max() > 1e-3


def test_relation_heads_must_divide_the_widths():
  x = np.zeros((B, S, HS), np.float32)
  with pytest.raises(ValueError, match="3 relation heads do not divide the hidden size 10"):
    intermediate.value_relation_loss(x, np.zeros((B, S, 9), np.float32), INPUT_MASK, 3)


def test_the_student_relation_is_the_models_own_attention():
  """exp(relation_log_probs(q, k)) @ v is the context the model's SelfAttention computes, with
  the mask the encoder gives it (packed rows' block mask included)."""
  block = layers.TransformerBlock(HS, N, 13, attention_probs_dropout_prob=0.0,
                                  hidden_dropout_prob=0.0, name="layer_2")
  x = _normal(_rng(19), B, S, HS, scale=1.0)
  block_mask = layers.PackedAttentionMask()(INPUT_MASK)
  block(x, block_mask)
  context = block.attention(x, block_mask, training=False)  # [B, S, H]
  q, k, v = intermediate.last_layer_qkv(block, x)
  probs = tf.exp(intermediate.relation_log_probs(q, k, N, intermediate.visibility(INPUT_MASK)))
  heads = tf.transpose(tf.reshape(v, [B, S, N, HS // N]), [0, 2, 1, 3])
  ours = tf.reshape(tf.transpose(tf.matmul(probs, heads), [0, 2, 1, 3]), [B, S, HS])
  np.testing.assert_allclose(ours.numpy(), context.numpy(), rtol=1e-5, atol=1e-6)
  # Unpacked rows: the original's [B, S] key mask gives the same.
  unpacked = (INPUT_MASK[:2] != 0).astype(np.int32)
  plain = block.attention(x[:2], unpacked, training=False)
  probs = tf.exp(intermediate.relation_log_probs(q[:2], k[:2], N,
                                                 intermediate.visibility(unpacked)))
  ours = tf.reshape(tf.transpose(tf.matmul(probs, heads[:2]), [0, 2, 1, 3]), [2, S, HS])
  np.testing.assert_allclose(ours.numpy(), plain.numpy(), rtol=1e-5, atol=1e-6)


# === Per-example means ===


def test_mean_per_row_and_per_slot():
  rng = _rng(20)
  values = _normal(rng, B, S) * REAL.astype(np.float32)
  expected_rows = (values * REAL).sum(-1) / REAL.sum(-1)
  _close(intermediate.mean_per_row(values, INPUT_MASK), expected_rows)
  _close(intermediate.mean_per_row(values, np.zeros((B, S), np.int32)), np.zeros(B))
  k = 3
  means, weights = intermediate.mean_per_slot(values, INPUT_MASK, k)
  expected_means, expected_weights = np.zeros((B, k)), np.zeros((B, k))
  for b in range(B):
    for slot in range(1, k + 1):
      own = INPUT_MASK[b] == slot
      if own.any():
        expected_means[b, slot - 1] = values[b][own].mean()
        expected_weights[b, slot - 1] = 1.0
  _close(means, expected_means.reshape(-1))
  _close(weights, expected_weights.reshape(-1), atol=0)


# === Every loss: float32 from 16-bit inputs, finite gradients, in a tf.function ===


def _every_loss(s, t, hs, ht):
  """Each loss on the student tensors (s: logits [B, S, C], hs: hidden [B, S, HS]) and the
  teacher's, summed to one float32 scalar per loss."""
  labels = tf.zeros([B, S], tf.int32)
  label_mask = tf.constant(REAL, tf.float32)
  out = dict(
      classifier=predictions.classifier_loss(s[:, 0], t[:, 0], labels[:, 0], 2.0, 0.5),
      regression=predictions.regression_loss(s[:, 0, 0], t[:, 0, 0], t[:, 1, 0], 0.5),
      tagger=predictions.tagger_loss(s, t, labels, label_mask, 2.0, 0.5),
      span=predictions.span_loss(s[..., 0], s[..., 1], t[..., 0], t[..., 1], labels[:, 0],
                                 labels[:, 1], 2.0, 0.5, position_mask=label_mask),
      masked_lm=predictions.masked_lm_soft_loss(s, t, label_mask, 2.0),
      cosine=predictions.cosine_loss(hs, hs * 0.5 + 1.0, INPUT_MASK),
      hidden=intermediate.hidden_state_mse([hs], [ht], [(1, 1)], INPUT_MASK,
                                           intermediate.HiddenProjection(HT)),
      attention=intermediate.attention_transfer_loss(hs, hs, ht, ht, INPUT_MASK, N),
      values=intermediate.value_relation_loss(hs, ht, INPUT_MASK, N))
  return {name: tf.reduce_sum(value) for name, value in out.items()}


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_16_bit_inputs_give_float32_losses(dtype):
  rng = _rng(21)
  s, t = _normal(rng, B, S, C), _normal(rng, B, S, C)
  hs, ht = _normal(rng, B, S, HS, scale=1.0), _normal(rng, B, S, HT, scale=1.0)
  keras.utils.set_random_seed(0)
  reference = _every_loss(*(tf.constant(x, dtype) for x in (s, t, hs, ht)))
  keras.utils.set_random_seed(0)
  rounded = _every_loss(*(tf.cast(tf.constant(x, dtype), tf.float32) for x in (s, t, hs, ht)))
  for name, value in reference.items():
    assert value.dtype == tf.float32, name
    # The same numbers once rounded to 16 bits: the loss itself runs in float32.
    np.testing.assert_allclose(value.numpy(), rounded[name].numpy(), rtol=2e-2, err_msg=name)


def test_gradients_are_finite_and_reach_the_student_only():
  rng = _rng(22)
  s, t = tf.Variable(_normal(rng, B, S, C)), tf.Variable(_normal(rng, B, S, C))
  hs, ht = (tf.Variable(_normal(rng, B, S, width, scale=1.0)) for width in (HS, HT))
  for name in _every_loss(s, t, hs, ht):
    with tf.GradientTape(persistent=True) as tape:
      value = _every_loss(s, t, hs, ht)[name]
    student = [g for g in tape.gradient(value, [s, hs]) if g is not None]
    assert student, name
    for g in student:
      assert np.isfinite(g.numpy()).all(), name
    if name not in ("regression",):  # regression's t[:, 1] is its gold score, not a teacher
      for g in tape.gradient(value, [t, ht]):
        assert g is None or not np.any(g.numpy()), name


def test_losses_run_in_a_tf_function_with_dynamic_shapes():
  spec = lambda width: tf.TensorSpec([None, None, width], tf.float32)

  @tf.function(input_signature=[spec(C), spec(C), spec(HS), spec(HT),
                                tf.TensorSpec([None, None], tf.int32)])
  def step(s, t, hs, ht, mask):
    return (predictions.tagger_loss(s, t, tf.zeros_like(mask), tf.cast(mask != 0, tf.float32),
                                    2.0, 0.5),
            intermediate.attention_transfer_loss(hs, hs, ht, ht, mask, N),
            intermediate.value_relation_loss(hs, ht, mask, N))

  rng = _rng(23)
  args = (_normal(rng, B, S, C), _normal(rng, B, S, C), _normal(rng, B, S, HS),
          _normal(rng, B, S, HT))
  for got, expected in zip(step(*args, INPUT_MASK), (
      predictions.tagger_loss(args[0], args[1], np.zeros((B, S), np.int32), REAL, 2.0, 0.5),
      intermediate.attention_transfer_loss(args[2], args[2], args[3], args[3], INPUT_MASK, N),
      intermediate.value_relation_loss(args[2], args[3], INPUT_MASK, N))):
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_a_distillation_step_of_real_encoders_under_a_strategy():
  """The intended use: a student and a frozen teacher encoder of other widths and depths on
  packed rows, every intermediate loss in one replica step of a tf.function; the gradients
  reach the student's last-layer query, key and value and the projection, never the teacher."""
  from bert_tf.model import encoder  # pylint: disable=g-import-not-at-top
  from tests.helpers import tiny_config  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(3)
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  with strategy.scope():
    student = encoder.build_encoder(tiny_config(hidden_size=HS, num_hidden_layers=2,
                                                num_attention_heads=N), packed=True)
    teacher = encoder.build_encoder(tiny_config(hidden_size=HT, num_hidden_layers=3,
                                                num_attention_heads=N), packed=True)
    layer_map = intermediate.parse_layer_map("uniform", 2, 3)
    projection = intermediate.HiddenProjection(HT, num_pairs=len(layer_map))
    projection([tf.zeros([1, 1, HS])] * len(layer_map))
  rng = _rng(24)
  inputs = dict(input_word_ids=rng.integers(5, 64, (B, S)).astype(np.int32),
                input_mask=INPUT_MASK, input_type_ids=np.zeros((B, S), np.int32),
                input_position_ids=np.array([list(range(7)), [0, 1, 2, 3, 0, 0, 0],
                                             [0, 1, 2, 0, 1, 0, 0]], np.int32),
                packed_cls_positions=np.array([[0] + [0] * 7, [0] + [0] * 7,
                                               [0, 3] + [0] * 6], np.int32))

  def losses_of(batch):
    s, t = student(batch, training=True), teacher(batch, training=False)
    sq, sk, sv = intermediate.last_layer_qkv(student.get_layer("layer_1"),
                                             s["encoder_outputs"][-2])
    tq, tk, tv = intermediate.last_layer_qkv(teacher.get_layer("layer_2"),
                                             t["encoder_outputs"][-2])
    mask = batch["input_mask"]
    per_position = (
        intermediate.hidden_state_mse(s["encoder_outputs"], t["encoder_outputs"], layer_map,
                                      mask, projection)
        + intermediate.attention_transfer_loss(sq, sk, tq, tk, mask, N)
        + intermediate.value_relation_loss(sv, tv, mask, N))
    return tf.reduce_sum(per_position) / tf.reduce_sum(predictions.real_positions(mask))

  watched = (student.get_layer("layer_1").attention.trainable_variables
             + projection.trainable_variables + teacher.trainable_variables)

  @tf.function
  def step(batch):
    def replica(batch):
      with tf.GradientTape() as tape:
        loss = losses_of(batch)
      return loss, tape.gradient(loss, watched)
    return strategy.run(replica, args=(batch,))

  loss, gradients = step({k: tf.constant(v) for k, v in inputs.items()})
  np.testing.assert_allclose(loss.numpy(), losses_of(inputs).numpy(), rtol=1e-5)
  assert loss.numpy() > 0
  student_side = len(watched) - len(teacher.trainable_variables)
  for variable, gradient in zip(watched[:student_side], gradients[:student_side]):
    assert gradient is not None and np.isfinite(gradient.numpy()).all(), variable.path
    assert np.abs(gradient.numpy()).max() > 0, variable.path
  assert all(g is None for g in gradients[student_side:])


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_projection_and_masks_under_a_mixed_policy(policy):
  """Under a mixed global policy the projection keeps float32 weights and computes in 16 bits,
  and the losses built on it stay float32 and close to the float32 policy's."""
  rng = _rng(25)
  student, teacher = _states(rng, 2, HS), _states(rng, 2, HT)
  full = intermediate.HiddenProjection(HT)
  expected = intermediate.hidden_state_mse(student, teacher, [(2, 2)], INPUT_MASK, full)
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(policy)
  try:
    mixed = intermediate.HiddenProjection(HT)
    mixed.build([(None, None, HS)])
    mixed.set_weights(full.get_weights())
    assert mixed.kernel.dtype == "float32"
    assert mixed([student[1]])[0].dtype == mixed.compute_dtype != "float32"
    got = intermediate.hidden_state_mse(student, teacher, [(2, 2)], INPUT_MASK, mixed)
    relation = intermediate.value_relation_loss(student[0], teacher[0], INPUT_MASK, N)
  finally:
    keras.config.set_dtype_policy(previous)
  assert got.dtype == relation.dtype == tf.float32
  np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=3e-2, atol=1e-2)
  np.testing.assert_allclose(
      relation.numpy(), intermediate.value_relation_loss(student[0], teacher[0], INPUT_MASK,
                                                         N).numpy(), rtol=1e-6)


def test_rows_of_padding_only_give_zero_losses_and_zero_gradients():
  """A batch row without a real position (a static packed batch's spare row): nothing counts,
  nothing is NaN."""
  rng = _rng(26)
  mask = np.zeros((2, S), np.int32)
  hs, ht = tf.Variable(_normal(rng, 2, S, HS)), tf.constant(_normal(rng, 2, S, HT))
  zero = tf.Variable(tf.zeros([2, S, HS]))
  with tf.GradientTape() as tape:
    values = [intermediate.attention_transfer_loss(hs, hs, ht, ht, mask, N),
              intermediate.value_relation_loss(hs, ht, mask, N),
              predictions.cosine_loss(zero, hs * 0.0, mask),
              intermediate.hidden_state_mse([hs], [hs * 2.0], [(1, 1)], mask)]
    total = tf.add_n([tf.reduce_sum(v) for v in values])
  for value in values:
    np.testing.assert_array_equal(value.numpy(), np.zeros((2, S)))
  for gradient in tape.gradient(total, [hs, zero]):
    np.testing.assert_array_equal(gradient.numpy(), np.zeros(gradient.shape))
  np.testing.assert_array_equal(intermediate.mean_per_row(values[0], mask).numpy(), [0.0, 0.0])
