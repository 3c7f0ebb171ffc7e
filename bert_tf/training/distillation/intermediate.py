"""Distillation losses inside the encoder: hidden states with a layer map, MiniLM's relations.

Hidden states (TinyBERT, Patient KD): each pair (student layer i, teacher layer j) of a layer map
adds the mean squared error between the student's layer-i output, projected to the teacher's
width by a learned HiddenProjection, and the teacher's layer-j output. Layers count from 1 (the
first transformer layer's output, encoder_outputs[0]) to L (the last, sequence_output).

Self-attention transfer (MiniLM, arXiv 2002.10957), on the last layer only, so no layer map:
  attention: KL(teacher || student) of each head's attention distribution softmax(Q K^T / sqrt(d))
  value relation: KL(teacher || student) of each head's softmax(V V^T / sqrt(d))
Both are [S, S] per head, so the widths need not match. Comparing head to head needs the same
number of heads: with num_heads equal to both models' num_attention_heads the attention term
is each model's own attention distribution. When the head counts differ, give any num_heads
that divides both hidden sizes: Q, K and V are then split into that many "relation heads"
(MiniLMv2, arXiv 2012.15828), which no longer are the models' own attention heads.

Masks follow the model's (model/layers.py): a query sees the real keys of its own example
(PackedAttentionMask, which for an unpacked row is the original's key mask), padding keys
weigh nothing, and padding queries are not counted.

The losses are per position ([B, S], 0 at padding); mean_per_row and mean_per_slot turn them
into the per-example means MiniLM averages (mean_per_slot for packed rows, one value per slot
in the pooled output's order), or the caller divides their sum by the global count of real
positions (TinyBERT's mean over positions).

Shape legend: B = batch, S = sequence, H = hidden size, N = relation heads, D = H / N,
K = examples per packed row.
"""

from typing import List, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from bert_tf.model import layers
from bert_tf.training.distillation import predictions

LAYER_MAP_FLAG = "--distill_layer_map"
LAYER_MAP_UNIFORM, LAYER_MAP_LAST = "uniform", "last"

# === The layer map ===


def parse_layer_map(value: str, student_layers: int,
                    teacher_layers: int) -> List[Tuple[int, int]]:
  """A --distill_layer_map value as (student layer, teacher layer) pairs, layers from 1.

  Args:
    value: "uniform" (student layer i -> teacher layer round(i * teacher / student), TinyBERT's
      i -> i * k, so the last maps to the last), "last" (the last to the last), or pairs
      "s:t,s:t" (e.g. "1:2,2:4,3:6").
    student_layers: the student's num_hidden_layers.
    teacher_layers: the teacher's num_hidden_layers.

  Returns:
    The pairs, in the order given (uniform: by student layer).

  Raises:
    ValueError: one line naming --distill_layer_map and what is wrong.
  """
  text = (value or "").strip()
  if not text:
    raise ValueError(f"{LAYER_MAP_FLAG} is empty: give {LAYER_MAP_UNIFORM}, {LAYER_MAP_LAST}, "
                     f"or pairs student:teacher such as 1:2,2:4")
  if text.lower() == LAYER_MAP_LAST:
    return [(student_layers, teacher_layers)]
  if text.lower() == LAYER_MAP_UNIFORM:
    if student_layers > teacher_layers:
      raise ValueError(f"{LAYER_MAP_FLAG}={LAYER_MAP_UNIFORM} needs a student with at most the "
                       f"teacher's layers (student {student_layers}, teacher {teacher_layers}): "
                       f"give pairs student:teacher")
    # round half up in integers: i * T / S + 1/2
    return [(i, (2 * i * teacher_layers + student_layers) // (2 * student_layers))
            for i in range(1, student_layers + 1)]
  pairs, seen = [], {}
  for item in text.split(","):
    pair = _parse_pair(item.strip(), student_layers, teacher_layers)
    if pair[0] in seen:
      raise ValueError(f"{LAYER_MAP_FLAG}: student layer {pair[0]} is mapped twice "
                       f"({seen[pair[0]]!r} and {item.strip()!r})")
    seen[pair[0]] = item.strip()
    pairs.append(pair)
  return pairs


def _parse_pair(item: str, student_layers: int, teacher_layers: int) -> Tuple[int, int]:
  parts = item.split(":")
  if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
    raise ValueError(f"{LAYER_MAP_FLAG}: {item!r} is not a pair student:teacher of layer "
                     f"numbers (e.g. 3:6), nor {LAYER_MAP_UNIFORM} or {LAYER_MAP_LAST}")
  student, teacher = int(parts[0]), int(parts[1])
  for who, layer, count in (("student", student, student_layers),
                            ("teacher", teacher, teacher_layers)):
    if not 1 <= layer <= count:
      raise ValueError(f"{LAYER_MAP_FLAG}: {who} layer {layer} in {item!r} is out of range "
                       f"1..{count} (the {who} has {count} layers, counted from 1)")
  return student, teacher


# === Hidden states through a learned projection ===


@keras.saving.register_keras_serializable(package="bert_tf")
class HiddenProjection(keras.layers.Layer):
  """Maps student hidden states to the teacher's width: one dense map per layer-map pair.

  Input: a list of `num_pairs` student hidden states [B, S, Hs] (the map's student layers, in
  the map's order). Output: the list of their projections [B, S, Ht], Ht = teacher_hidden_size.
  The weights are one kernel [num_pairs, Hs, Ht] and one bias [num_pairs, Ht]; with
  num_pairs=1 every pair shares one map (TinyBERT's single W_h).
  """

  def __init__(self, teacher_hidden_size: int, num_pairs: int = 1,
               initializer_range: float = 0.02, **kwargs):
    super().__init__(**kwargs)
    if teacher_hidden_size < 1 or num_pairs < 1:
      raise ValueError(f"HiddenProjection needs teacher_hidden_size >= 1 and num_pairs >= 1, "
                       f"got {teacher_hidden_size} and {num_pairs}")
    self.teacher_hidden_size = teacher_hidden_size
    self.num_pairs = num_pairs
    self.initializer_range = initializer_range

  def build(self, input_shape):
    shapes = list(input_shape)
    student_width = shapes[0][-1]
    self.kernel = self.add_weight(
        name="kernel", shape=(self.num_pairs, student_width, self.teacher_hidden_size),
        initializer=layers.truncated_normal(self.initializer_range))
    self.bias = self.add_weight(name="bias", shape=(self.num_pairs, self.teacher_hidden_size),
                                initializer="zeros")
    self.built = True

  def call(self, hidden_states):
    states = list(hidden_states)
    if self.num_pairs not in (1, len(states)):
      raise ValueError(f"HiddenProjection has {self.num_pairs} maps but got {len(states)} "
                       f"hidden states")
    kernel = tf.cast(self.kernel, self.compute_dtype)
    bias = tf.cast(self.bias, self.compute_dtype)
    projected = []
    for index, state in enumerate(states):
      which = index if self.num_pairs > 1 else 0
      state = tf.cast(state, self.compute_dtype)
      projected.append(tf.einsum("bsh,ht->bst", state, kernel[which]) + bias[which])
    return projected

  def get_config(self):
    config = super().get_config()
    config.update(teacher_hidden_size=self.teacher_hidden_size, num_pairs=self.num_pairs,
                  initializer_range=self.initializer_range)
    return config


def hidden_state_mse(student_states: Sequence, teacher_states: Sequence,
                     layer_map: Sequence[Tuple[int, int]], input_mask,
                     projection: Optional[HiddenProjection] = None):
  """Per-position sum over the map's pairs of the mean squared error over the hidden units.

  Args:
    student_states: the student's encoder_outputs, L_s tensors [B, S, Hs].
    teacher_states: the teacher's encoder_outputs, L_t tensors [B, S, Ht].
    layer_map: (student layer, teacher layer) pairs from 1 (parse_layer_map).
    input_mask: [B, S] 0 for padding (packed rows' slots count as real).
    projection: maps the map's student states to Ht (None: the widths must be equal).

  Returns:
    float32 [B, S], 0 at padding: sum over pairs of mean_h (P(s_i) - t_j)^2. The caller
    divides the sum by the count of real positions (or uses mean_per_row).
  """
  if not layer_map:
    raise ValueError("hidden_state_mse needs at least one (student, teacher) layer pair")
  for student, teacher in layer_map:
    if not (1 <= student <= len(student_states) and 1 <= teacher <= len(teacher_states)):
      raise ValueError(f"layer pair {student}:{teacher} is outside the student's "
                       f"{len(student_states)} and the teacher's {len(teacher_states)} layers")
  chosen = [student_states[s - 1] for s, _ in layer_map]
  if projection is not None:
    chosen = projection(chosen)
  total = 0.0
  for state, (student, teacher) in zip(chosen, layer_map):
    target = teacher_states[teacher - 1]
    if state.shape[-1] != target.shape[-1]:
      raise ValueError(f"student layer {student} has width {state.shape[-1]} but teacher layer "
                       f"{teacher} has {target.shape[-1]}: give a HiddenProjection")
    difference = tf.cast(state, tf.float32) - tf.stop_gradient(tf.cast(target, tf.float32))
    total += tf.reduce_mean(tf.square(difference), axis=-1)
  return total * predictions.real_positions(input_mask)


# === MiniLM: the last layer's self-attention relations ===


def last_layer_qkv(block, layer_input):
  """The query, key and value [B, S, H] a TransformerBlock computes from its input, with its
  own weights (gradients reach them), for the attention and value-relation losses.

  Args:
    block: the model's last TransformerBlock (its layer `layer_{L-1}`).
    layer_input: [B, S, H] its input: encoder_outputs[-2] (for one layer, the embeddings).
  """
  attention = block.attention
  return attention.query(layer_input), attention.key(layer_input), attention.value(layer_input)


def visibility(input_mask):
  """float32 [B, S, S]: 1 where a query may see a key, the mask the model's attention uses
  (layers.PackedAttentionMask: real keys of the query's own example; for an unpacked row,
  every real key)."""
  return tf.cast(layers.PackedAttentionMask()(input_mask), tf.float32)


def relation_log_probs(x, y, num_heads: int, visible):
  """log softmax(x_n y_n^T / sqrt(D)) per relation head n, keys masked as the model masks them.

  Args:
    x: [B, S, H] (queries, or values for the value relation).
    y: [B, S, H] (keys, or values).
    num_heads: N, dividing H.
    visible: [B, S, S] visibility(input_mask).

  Returns:
    float32 [B, N, S, S]: for query s, the log-probabilities over keys; invisible keys get
    the model's -10000 adder (their probability is 0 in float32).
  """
  width = x.shape[-1]
  if width is None or width % num_heads:
    raise ValueError(f"{num_heads} relation heads do not divide the hidden size {width}")
  head_size = width // num_heads

  def split(t):  # [B, S, H] -> [B, N, S, D]
    t = tf.cast(t, tf.float32)
    shape = tf.shape(t)
    t = tf.reshape(t, [shape[0], shape[1], num_heads, head_size])
    return tf.transpose(t, [0, 2, 1, 3])

  scores = tf.matmul(split(x), split(y), transpose_b=True) * (head_size ** -0.5)
  scores += (1.0 - visible[:, None, :, :]) * layers.MASK_ADDER
  return tf.nn.log_softmax(scores, axis=-1)


def relation_kl(student_x, student_y, teacher_x, teacher_y, input_mask, num_heads: int):
  """Per-query KL(teacher || student) of the relations softmax(x y^T / sqrt(D)), mean over the
  N relation heads, summed over the visible keys.

  Args:
    student_x, student_y: the student's [B, S, Hs].
    teacher_x, teacher_y: the teacher's [B, S, Ht].
    input_mask: [B, S] the batch's input_mask (packed rows: example slots 1..K).
    num_heads: N relation heads, dividing Hs and Ht.

  Returns:
    float32 [B, S], 0 at padding queries.
  """
  visible = visibility(input_mask)
  student = relation_log_probs(student_x, student_y, num_heads, visible)
  teacher = tf.stop_gradient(relation_log_probs(teacher_x, teacher_y, num_heads, visible))
  # Invisible keys add nothing: p_t is exactly 0 there in float32 (exp of about -10000) and
  # the log-probabilities stay finite, so 0 * (log p_t - log p_s) is 0, never NaN.
  kl = tf.reduce_sum(tf.exp(teacher) * (teacher - student), axis=-1)
  return tf.reduce_mean(kl, axis=1) * predictions.real_positions(input_mask)


def attention_transfer_loss(student_q, student_k, teacher_q, teacher_k, input_mask,
                            num_heads: int):
  """MiniLM's attention transfer: per-query KL of the last layer's attention distributions.

  Args:
    student_q, student_k: [B, S, Hs] the student's last-layer queries and keys
      (last_layer_qkv).
    teacher_q, teacher_k: [B, S, Ht] the teacher's.
    input_mask: [B, S] (packed rows: example slots).
    num_heads: both models' num_attention_heads (when they differ: a count dividing both
      widths, see the module docstring).

  Returns:
    float32 [B, S], 0 at padding queries.
  """
  return relation_kl(student_q, student_k, teacher_q, teacher_k, input_mask, num_heads)


def value_relation_loss(student_v, teacher_v, input_mask, num_heads: int):
  """MiniLM's value-relation transfer: per-query KL of softmax(V V^T / sqrt(D)) per head.

  Args:
    student_v: [B, S, Hs] the student's last-layer values (last_layer_qkv).
    teacher_v: [B, S, Ht] the teacher's.
    input_mask: [B, S] (packed rows: example slots).
    num_heads: as attention_transfer_loss.

  Returns:
    float32 [B, S], 0 at padding queries.
  """
  return relation_kl(student_v, student_v, teacher_v, teacher_v, input_mask, num_heads)


# === Per-example means of per-position losses ===


def mean_per_row(values, input_mask):
  """float32 [B]: each row's mean of values [B, S] over its real positions (0 for none)."""
  weights = predictions.real_positions(input_mask)
  return tf.math.divide_no_nan(tf.reduce_sum(tf.cast(values, tf.float32) * weights, axis=-1),
                               tf.reduce_sum(weights, axis=-1))


def mean_per_slot(values, input_mask, num_slots: int):
  """Packed rows: each example's mean of values [R, S] over its own positions.

  Args:
    values: [R, S] per-position losses.
    input_mask: [R, S] example slots (1..K, 0 = padding).
    num_slots: K (row_packing.MAX_EXAMPLES_PER_ROW).

  Returns:
    (means, weights), float32 [R * K] each in the pooled output's slot order: slot k of row r
    at r * K + k; weights are 1 for a slot holding an example, 0 for an empty one.
  """
  slots = tf.one_hot(tf.cast(input_mask, tf.int32) - 1, num_slots, dtype=tf.float32)  # [R,S,K]
  sums = tf.einsum("rs,rsk->rk", tf.cast(values, tf.float32), slots)
  counts = tf.reduce_sum(slots, axis=1)
  means = tf.math.divide_no_nan(sums, counts)
  weights = tf.cast(counts > 0, tf.float32)
  return tf.reshape(means, [-1]), tf.reshape(weights, [-1])
