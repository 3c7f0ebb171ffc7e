"""Distillation losses on the heads' outputs: soft targets of a teacher at a temperature.

The soft loss of one prediction is the cross-entropy between the teacher's and the student's
distributions at temperature T, scaled by T^2 (Hinton et al. 2015: the gradients of soft
targets shrink as 1/T^2, so the scaling keeps the soft and hard terms comparable when T
changes):

  soft = -T^2 * sum_c softmax(teacher / T)_c * log softmax(student / T)_c

It differs from KL(teacher || student) * T^2 by the teacher's entropy, a constant for the
student, so both give the same gradients; the cross-entropy is what is reported.

The task losses mix it with the task's own (hard-label) loss:

  loss = alpha * hard + (1 - alpha) * soft

alpha is the weight of the hard loss (0 = soft targets only, 1 = the task's own loss). A
regression head has no distribution: its soft loss is the squared error to the teacher's score.

Every function returns float32 per example ([B]) or per position ([B, S], [B, P]) with padding
already weighted out; the caller sums and divides by its global batch (classifier, SQuAD) or by
the global count of weighted positions (tagger, masked LM, cosine), as the tasks do with the
hard loss alone. The teacher's outputs are held constant (stop_gradient): the teacher is frozen.

Shape legend: B = batch (for SQuAD: windows), C = classes, S = sequence, P = masked positions
per example, V = vocab size, H = hidden size.
"""

import tensorflow as tf

from bert_tf.training import losses

# Logits of excluded classes / positions: far below any real logit even after dividing by T,
# and finite, so that 0 * log p is 0 and never NaN.
EXCLUDED_LOGIT = -1e9
# Keeps the cosine finite for an all-zero hidden state (as tf.math.l2_normalize's default).
COSINE_EPSILON = 1e-12


def frozen_outputs(model, model_inputs):
  """batch -> `model`'s outputs on model_inputs(batch), in inference mode (no dropout), held
  constant: a frozen teacher run inside the student's training step."""

  def teacher_outputs(batch):
    outputs = model(model_inputs(batch), training=False)
    return {key: tf.stop_gradient(value) for key, value in outputs.items()}

  return teacher_outputs


def check_temperature(temperature: float) -> float:
  """The temperature as a float; ValueError unless it is > 0."""
  if not temperature > 0:
    raise ValueError(f"the distillation temperature must be > 0, got {temperature}")
  return float(temperature)


def check_alpha(alpha: float) -> float:
  """alpha (the hard loss's weight) as a float; ValueError unless 0 <= alpha <= 1."""
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f"the hard-label weight alpha must be in [0, 1], got {alpha}")
  return float(alpha)


def _float32(x):
  return tf.cast(x, tf.float32)


def _teacher(x):
  return tf.stop_gradient(_float32(x))


# === The soft cross-entropy ===


def soft_cross_entropy(student_logits, teacher_logits, temperature: float,
                       class_mask=None):
  """T^2 * cross-entropy of softmax(student / T) against softmax(teacher / T).

  Args:
    student_logits: [..., C] logits, any float dtype.
    teacher_logits: [..., C] the teacher's logits for the same predictions.
    temperature: T > 0.
    class_mask: optional [..., C] (or broadcastable): 0 for classes excluded from both
      distributions (e.g. a SQuAD window's padding positions), 1 otherwise.

  Returns:
    float32 [...]: the soft loss of each prediction.
  """
  t = check_temperature(temperature)
  student = _float32(student_logits) / t
  teacher = _teacher(teacher_logits) / t
  if class_mask is not None:
    keep = tf.cast(class_mask, tf.bool)
    student = tf.where(keep, student, EXCLUDED_LOGIT)
    teacher = tf.where(keep, teacher, EXCLUDED_LOGIT)
  targets = tf.nn.softmax(teacher, axis=-1)
  if class_mask is not None:  # exactly 0 on excluded classes, whatever the rounding
    targets *= tf.cast(keep, tf.float32)
  cross_entropy = -tf.reduce_sum(targets * tf.nn.log_softmax(student, axis=-1), axis=-1)
  return cross_entropy * (t * t)


def _mix(alpha: float, hard, soft, hard_weights=None):
  """alpha * hard * hard_weights + (1 - alpha) * soft, skipping a term whose weight is 0."""
  total = 0.0
  if alpha > 0.0:
    if hard_weights is not None:
      hard = hard * tf.cast(hard_weights, tf.float32)
    total += alpha * hard
  if alpha < 1.0:
    total += (1.0 - alpha) * soft
  return total


# === The task heads ===


def classifier_loss(student_logits, teacher_logits, labels, temperature: float, alpha: float,
                    hard_weights=None):
  """Per-example loss of a classifier: alpha * cross-entropy to the label + (1 - alpha) * the
  soft loss at T (run_classifier.py:create_model's loss as the hard term).

  Args:
    student_logits: [B, C].
    teacher_logits: [B, C] (unused when alpha is 1).
    labels: [B] or [B, 1] int label ids (None when alpha is 0: data without labels).
    temperature: T > 0.
    alpha: the hard loss's weight, in [0, 1].
    hard_weights: optional [B]: 0 for an example without a label (its hard term is dropped),
      1 otherwise.

  Returns:
    float32 [B]; the caller sums its real examples and divides by the global batch.
  """
  alpha = check_alpha(alpha)
  soft = soft_cross_entropy(student_logits, teacher_logits, temperature) if alpha < 1 else None
  hard = None
  if alpha > 0:
    hard = losses.sparse_nll(_float32(student_logits), tf.reshape(labels, [-1]))
  return _mix(alpha, hard, soft, hard_weights)


def regression_loss(student_scores, teacher_scores, targets, alpha: float, hard_weights=None):
  """Per-example loss of a regression head: alpha * (s - target)^2 + (1 - alpha) * (s - t)^2,
  the task's own squared error and the squared error to the teacher's score (no temperature:
  a score is no distribution).

  Args:
    student_scores: [B] or [B, 1].
    teacher_scores: [B] or [B, 1].
    targets: [B] or [B, 1] gold scores (None when alpha is 0).
    alpha: the hard loss's weight, in [0, 1].
    hard_weights: optional [B]: 0 for an example without a gold score.

  Returns:
    float32 [B].
  """
  alpha = check_alpha(alpha)
  student = tf.reshape(_float32(student_scores), [-1])
  soft = tf.square(student - tf.reshape(_teacher(teacher_scores), [-1])) if alpha < 1 else None
  hard = tf.square(student - tf.reshape(_float32(targets), [-1])) if alpha > 0 else None
  return _mix(alpha, hard, soft, hard_weights)


def tagger_loss(student_logits, teacher_logits, label_ids, label_weights, temperature: float,
                alpha: float, hard_weights=None):
  """Per-position loss of a token tagger over the positions its own loss counts.

  The tagger's loss (tasks/tagging.py) is the cross-entropy at the positions of label_mask 1
  (each word's first piece), divided by the global count of those positions; padding and the
  other pieces of a word weigh 0. The soft loss counts the same positions.

  Args:
    student_logits: [B, S, C].
    teacher_logits: [B, S, C].
    label_ids: [B, S] int (None when alpha is 0).
    label_weights: [B, S] the tagger's label_mask (1 = a labelled position).
    temperature: T > 0.
    alpha: the hard loss's weight, in [0, 1].
    hard_weights: optional, broadcastable to [B, S] (e.g. [B, 1]): 0 where a position has no
      gold label but the teacher's targets count.

  Returns:
    float32 [B, S], 0 where label_weights is 0; the caller divides the sum by the global
    sum of label_weights.
  """
  alpha = check_alpha(alpha)
  soft = soft_cross_entropy(student_logits, teacher_logits, temperature) if alpha < 1 else None
  hard = losses.sparse_nll(_float32(student_logits), label_ids) if alpha > 0 else None
  return _mix(alpha, hard, soft, hard_weights) * _float32(label_weights)


def span_loss(student_start, student_end, teacher_start, teacher_end, start_positions,
              end_positions, temperature: float, alpha: float, position_mask=None,
              hard_weights=None):
  """Per-window loss of a SQuAD head: the average of the start and end losses, each mixing
  the cross-entropy to the gold position with the soft loss over positions (the original's
  run_squad.py:model_fn averages its start and end losses the same way).

  Args:
    student_start, student_end: [B, S] start and end logits.
    teacher_start, teacher_end: [B, S] the teacher's.
    start_positions, end_positions: [B] or [B, 1] gold positions (None when alpha is 0).
    temperature: T > 0.
    alpha: the hard loss's weight, in [0, 1].
    position_mask: optional [B, S]: 0 for positions outside the window (none: every position
      counts, as the original's softmax over all S positions; packed rows unpacked with
      PADDED_LOGIT need none either, their padding is already far below).
    hard_weights: optional [B]: 0 for a window without gold positions.

  Returns:
    float32 [B]; the caller sums its windows and divides by the global batch.
  """
  alpha = check_alpha(alpha)
  total = 0.0
  for student, teacher, positions in ((student_start, teacher_start, start_positions),
                                      (student_end, teacher_end, end_positions)):
    student = _float32(student)
    if position_mask is not None:
      student = tf.where(tf.cast(position_mask, tf.bool), student, EXCLUDED_LOGIT)
    soft = (soft_cross_entropy(student, teacher, temperature, position_mask)
            if alpha < 1 else None)
    hard = (losses.sparse_nll(student, tf.reshape(positions, [-1])) if alpha > 0 else None)
    total += _mix(alpha, hard, soft, hard_weights)
  return total / 2.0


# === Pretraining (DistilBERT's triple loss: soft masked LM, hard masked LM, cosine) ===


def masked_lm_soft_loss(student_logits, teacher_logits, label_weights, temperature: float):
  """Per-slot soft loss of the masked LM over the gathered masked positions.

  The hard masked LM loss stays training/losses.py's masked_lm_loss; DistilBERT weighs the
  two and the cosine loss with separate weights, so there is no alpha here.

  Args:
    student_logits: [B, P, V] the masked LM logits at the masked positions.
    teacher_logits: [B, P, V] the teacher's at the same positions.
    label_weights: [B, P] masked_lm_weights (1 = a real prediction, 0 = padding slot).
    temperature: T > 0.

  Returns:
    float32 [B, P], 0 at padding slots; the caller divides the sum by the sum of label_weights
    (with training/losses.py's MASKED_LM_DENOMINATOR_EPSILON, as the hard loss).
  """
  soft = soft_cross_entropy(student_logits, teacher_logits, temperature)
  return soft * _float32(label_weights)


def cosine_loss(student_hidden, teacher_hidden, input_mask):
  """Per-position 1 - cos(student, teacher) of hidden states, over real positions.

  Args:
    student_hidden: [B, S, H] the student's last hidden states.
    teacher_hidden: [B, S, H] the teacher's (the same width H: DistilBERT's students keep
      the teacher's width; project first otherwise, intermediate.HiddenProjection).
    input_mask: [B, S] 0 for padding; packed rows' example slots (1..K) count as real.

  Returns:
    float32 [B, S], 0 at padding; the caller divides the sum by the count of real positions.
  """
  if student_hidden.shape[-1] is not None and teacher_hidden.shape[-1] is not None and \
      student_hidden.shape[-1] != teacher_hidden.shape[-1]:
    raise ValueError(f"the cosine loss needs hidden states of one width: the student's "
                     f"{student_hidden.shape[-1]}, the teacher's {teacher_hidden.shape[-1]}")
  student = tf.math.l2_normalize(_float32(student_hidden), axis=-1, epsilon=COSINE_EPSILON)
  teacher = tf.math.l2_normalize(_teacher(teacher_hidden), axis=-1, epsilon=COSINE_EPSILON)
  cosine = tf.reduce_sum(student * teacher, axis=-1)
  return (1.0 - cosine) * real_positions(input_mask)


def real_positions(input_mask):
  """float32 [B, S]: 1 at real positions (input_mask != 0: 1, or a packed row's slot 1..K)."""
  return tf.cast(tf.not_equal(tf.cast(input_mask, tf.int32), 0), tf.float32)
