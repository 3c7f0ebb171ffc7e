"""The intermediate distillation losses in a fine-tuning step: what each model exposes, and the
loss they add to the task's.

With --teacher, each of these losses is on when its weight is above 0 (all are off by default):

  --distill_hidden_weight     hidden states, pairs of layers from --distill_layer_map
                              (intermediate.hidden_state_mse), the student's through a learned
                              HiddenProjection when the two widths differ (equal widths are
                              compared directly, as Patient KD and DistilBERT do)
  --distill_attention_weight  MiniLM's attention transfer on the last layer
                              (intermediate.attention_transfer_loss)
  --distill_value_weight      MiniLM's value relation on the last layer
                              (intermediate.value_relation_loss)

in --distill_relation_heads heads (default: the student's num_attention_heads). Each is a sum
over the real positions of the global batch divided by their count (packed rows count each
example's own positions, so packed and unpacked batches give one loss):

  loss = the task's distilled loss + w_h * hidden + w_a * attention + w_v * value

What the models expose (feature_model): a Keras model sharing a task model's layers (so its
weights) whose outputs add to the model's the hidden states of the layers the map names
(every position: a classifier's last layer, which computes only [CLS] for its head, is run
again over every position) and the last layer's query, key and value (intermediate.
last_layer_qkv, from the last layer's input). Only a run with these losses builds one: without
them the step runs the task's model, unchanged.

The student's feature model holds the HiddenProjection, so its weights train with the student
(loop.prepare_run's step_model) and are saved in the run's checkpoints beside the model
(run_folder.EXTRA_WEIGHTS), never in it: the run's model, its checkpoints' model weights and
its export are those of a run without the projection, and a resumed run keeps the projection.
"""

import dataclasses
import re
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import keras
import tensorflow as tf

from bert_tf.training import loop
from bert_tf.training.distillation import intermediate
from bert_tf.training.distillation import predictions

HIDDEN = "distill_hidden_{}"  # a feature model's output: layer i's hidden states (i from 1)
QUERY, KEY, VALUE = "distill_query", "distill_key", "distill_value"
PROJECTION_LAYER = "distill_projection"
# The teacher's outputs computed once in a step, handed to the task's distilled loss in its
# batch (read by the teacher_outputs function the task was given).
TEACHER_OUTPUTS = "distill_teacher_outputs"
POSITIONS = "distill_positions"  # the normalizer: the global batch's real positions
LOSSES = (("hidden_loss", "hidden_weight"), ("attention_loss", "attention_weight"),
          ("value_loss", "value_weight"))


@dataclasses.dataclass(frozen=True)
class Plan:
  """What a run's intermediate losses are: their weights, the layer map (pairs from 1; empty
  when the hidden loss is off), the relation heads (None when the MiniLM losses are off), and
  the two widths (a projection when they differ)."""
  hidden_weight: float = 0.0
  attention_weight: float = 0.0
  value_weight: float = 0.0
  layer_map: Tuple[Tuple[int, int], ...] = ()
  relation_heads: Optional[int] = None
  student_width: int = 0
  teacher_width: int = 0

  @property
  def on(self) -> bool:
    return self.hidden_weight > 0 or self.qkv

  @property
  def qkv(self) -> bool:
    """Whether the MiniLM losses read the last layer's query, key and value."""
    return self.attention_weight > 0 or self.value_weight > 0

  @property
  def projected(self) -> bool:
    return self.hidden_weight > 0 and self.student_width != self.teacher_width


def plan(settings, student_config, teacher_config) -> Plan:
  """The run's Plan from its settings (the distill_* fields) and both models' configs.

  Raises:
    ValueError: one line naming the flag: a layer map the two models cannot have, relation
      heads that do not divide both hidden sizes.
  """
  weights = dict(hidden_weight=float(settings.distill_hidden_weight),
                 attention_weight=float(settings.distill_attention_weight),
                 value_weight=float(settings.distill_value_weight))
  layer_map = ()
  if weights["hidden_weight"] > 0:
    layer_map = tuple(intermediate.parse_layer_map(
        settings.distill_layer_map, student_config.num_hidden_layers,
        teacher_config.num_hidden_layers))
  heads = None
  if weights["attention_weight"] > 0 or weights["value_weight"] > 0:
    heads = settings.distill_relation_heads or student_config.num_attention_heads
    widths = (student_config.hidden_size, teacher_config.hidden_size)
    if any(width % heads for width in widths):
      given = ("" if settings.distill_relation_heads else
               " (the student's num_attention_heads; give --distill_relation_heads)")
      raise ValueError(f"--distill_relation_heads={heads}{given} must divide both hidden "
                       f"sizes: the student's {widths[0]} and the teacher's {widths[1]}")
  return Plan(layer_map=layer_map, relation_heads=heads, student_width=student_config.hidden_size,
              teacher_width=teacher_config.hidden_size, **weights)


def describe(the_plan: Plan, student_config, teacher_config) -> str:
  """One line for the log: which losses, with which weights, layers and heads."""
  parts = []
  if the_plan.hidden_weight > 0:
    pairs = ",".join(f"{s}:{t}" for s, t in the_plan.layer_map)
    projection = (f"through a projection {the_plan.student_width}->{the_plan.teacher_width}"
                  if the_plan.projected else "compared directly (one width)")
    parts.append(f"hidden states x {the_plan.hidden_weight} (layers {pairs}, {projection})")
  own = (student_config.num_attention_heads == teacher_config.num_attention_heads
         == the_plan.relation_heads)
  heads = f"{the_plan.relation_heads} {'attention' if own else 'relation'} heads"
  if the_plan.attention_weight > 0:
    parts.append(f"last-layer attention x {the_plan.attention_weight} ({heads})")
  if the_plan.value_weight > 0:
    parts.append(f"last-layer value relation x {the_plan.value_weight} ({heads})")
  return "Intermediate distillation losses: " + "; ".join(parts)


# === What the models expose ===


def _blocks(model: keras.Model):
  """The model's TransformerBlocks layer_0 .. layer_{L-1}, in order."""
  count = len([layer for layer in model.layers if re.fullmatch(r"layer_\d+", layer.name)])
  return [model.get_layer(f"layer_{i}") for i in range(count)]


def feature_model(model: keras.Model, layers: Sequence[int], qkv: bool,
                  projection: Optional[intermediate.HiddenProjection] = None,
                  name: Optional[str] = None) -> keras.Model:
  """A model sharing `model`'s layers whose outputs add to model's the hidden states of
  `layers` (from 1, every position: HIDDEN.format(i), [B, S, H]) and, with qkv, the last
  layer's QUERY, KEY and VALUE ([B, S, H]).

  With a projection, the hidden states of `layers` (in their order) go through it: the
  outputs are then the projections, [B, S, projection.teacher_hidden_size].
  """
  blocks = _blocks(model)
  outputs = dict(model.output)
  last = blocks[-1]
  # A layer's first call (the model's): its input [x, mask] or [x, mask, query positions].
  last_args = list(last.input)
  hidden = {}
  for layer in layers:
    block = blocks[layer - 1]
    if block is last and len(last_args) > 2 and last_args[2] is not None:
      hidden[layer] = last(last_args[0], last_args[1])  # the head's pruned call: all positions
    else:
      hidden[layer] = block.output
  states = [hidden[layer] for layer in layers]
  if projection is not None and states:
    states = projection(states)
  outputs.update({HIDDEN.format(layer): state for layer, state in zip(layers, states)})
  if qkv:
    outputs.update(zip((QUERY, KEY, VALUE), intermediate.last_layer_qkv(last, last_args[0])))
  return keras.Model(model.input, outputs, name=name or f"{model.name}_features")


class StepModel(keras.Model):
  """The student's feature model as the training step runs it. Its trainable variables are the
  student's, in the student's own order, then the projection's: the optimizer's slots of a run
  with these losses line up with those of a run without them."""

  def __init__(self, model: keras.Model, features: keras.Model, **kwargs):
    super().__init__(**kwargs)
    self.student = model  # tracked first: its variables come first
    self.features = features

  def call(self, inputs, training=None):
    return self.features(inputs, training=training)


def student_step_model(the_plan: Plan, initializer_range: float):
  """loop.prepare_run's step_model for the student: model -> (its StepModel, the projection's
  holder to checkpoint beside it, or None)."""

  def build(model):
    projection = None
    if the_plan.projected:
      projection = intermediate.HiddenProjection(
          the_plan.teacher_width, num_pairs=len(the_plan.layer_map),
          initializer_range=initializer_range, name=PROJECTION_LAYER)
    stepped = StepModel(model, feature_model(model, [s for s, _ in the_plan.layer_map],
                                             the_plan.qkv, projection),
                        name=f"{model.name}_distilled")
    if projection is None:
      return stepped, None
    holder = tf.Module(name="distillation")
    holder.projection = projection
    return stepped, holder

  return build


def teacher_feature_model(the_plan: Plan, teacher_model: keras.Model) -> keras.Model:
  """The frozen teacher's feature model: the map's teacher layers and its last layer's q, k, v."""
  return feature_model(teacher_model, [t for _, t in the_plan.layer_map], the_plan.qkv)


# === The loss ===


def intermediate_losses(the_plan: Plan, student, teacher, input_mask) -> Dict[str, Any]:
  """The per-position losses [B, S] that are on, by name (LOSSES), from the student's and the
  teacher's feature-model outputs."""
  values = {}
  if the_plan.hidden_weight > 0:
    pairs = list(the_plan.layer_map)
    # The student's outputs are already projected: pair k compares the k-th projection with
    # the teacher's layer, so the map is re-indexed over the lists given.
    values["hidden_loss"] = intermediate.hidden_state_mse(
        [student[HIDDEN.format(s)] for s, _ in pairs],
        [teacher[HIDDEN.format(t)] for _, t in pairs],
        [(k, k) for k in range(1, len(pairs) + 1)], input_mask)
  if the_plan.attention_weight > 0:
    values["attention_loss"] = intermediate.attention_transfer_loss(
        student[QUERY], student[KEY], teacher[QUERY], teacher[KEY], input_mask,
        the_plan.relation_heads)
  if the_plan.value_weight > 0:
    values["value_loss"] = intermediate.value_relation_loss(
        student[VALUE], teacher[VALUE], input_mask, the_plan.relation_heads)
  return values


def distilled_task(base: loop.Task, teacher_outputs: Callable[[Any], Dict[str, Any]],
                   the_plan: Plan) -> loop.Task:
  """`base` (the task's distilled loss) plus the plan's weighted intermediate losses.

  Args:
    base: the task's loop.Task mixing its loss with the teacher's soft targets; its
      teacher_outputs must return batch[TEACHER_OUTPUTS] when the batch holds it, so that the
      teacher runs once per step.
    teacher_outputs: batch -> the teacher feature model's outputs (frozen, held constant).
    the_plan: the losses and weights.

  Returns:
    The loop.Task; its sums and logged metrics add each loss's mean per step (hidden_loss,
    attention_loss, value_loss: unweighted).
  """
  names = tuple(name for name, weight in LOSSES if getattr(the_plan, weight) > 0)

  def input_mask(batch):
    return base.model_inputs(batch)["input_mask"]

  def normalizers(batch):
    values = dict(base.normalizers(batch))
    values[POSITIONS] = tf.reduce_sum(predictions.real_positions(input_mask(batch)))
    return values

  def replica_loss(outputs, batch, global_normalizers, examples_per_update):
    teacher = teacher_outputs(batch)
    loss, sums = base.replica_loss(outputs, dict(batch, **{TEACHER_OUTPUTS: teacher}),
                                   global_normalizers, examples_per_update)
    sums = dict(sums)
    positions = tf.maximum(global_normalizers[POSITIONS], 1.0)
    for name, per_position in intermediate_losses(the_plan, outputs, teacher,
                                                  input_mask(batch)).items():
      share = tf.reduce_sum(per_position) / positions
      loss += getattr(the_plan, dict(LOSSES)[name]) * share
      sums[name] = share
    return loss, sums

  def train_metrics(totals, good_steps):
    metrics = dict(base.train_metrics(totals, good_steps))
    metrics.update({name: totals[name] / max(good_steps, 1) for name in names})
    return metrics

  return base._replace(normalizers=normalizers, replica_loss=replica_loss,
                       sum_names=tuple(base.sum_names) + names, train_metrics=train_metrics)
