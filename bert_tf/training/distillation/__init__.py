"""Knowledge distillation's model-level math: losses between a student's and a teacher's outputs.

  predictions   soft targets on the heads' outputs (classifier, regression, tagger, SQuAD spans,
                masked LM) mixed with the hard-label loss, and the cosine of hidden states
  intermediate  hidden states through a learned projection with a layer map, and MiniLM's
                last-layer attention and value-relation transfer
  features      those intermediate losses in a fine-tuning step: the models' feature views
                (layer outputs, last-layer Q/K/V, the projection) and the loss they add
  teacher       the checks that a teacher folder can teach a student (vocab, casing, labels,
                head kind, max_seq_length), from what model/provenance.py records

Every loss is computed in float32 whatever the inputs' dtype, and is returned per example or
per position with the padding already weighted out: the caller sums it and divides by its
global batch (or its global count of positions), as the tasks do with training/losses.py.
The functions take tensors and numbers, never flags, and run inside a tf.function on any
strategy.

A classifier task's replica loss, for example, becomes (weights, denominator as
tasks/classifier.py has them; teacher_logits from the frozen teacher or its cache):

  per_example = predictions.classifier_loss(outputs["logits"], teacher_logits,
                                            batch["label_ids"], temperature, alpha)
  loss = tf.reduce_sum(weights * per_example) / denominator

and the intermediate losses add their per-position sums over the global count of real
positions, each with its own weight.
"""

import math

# The defaults of --distill_alpha (the hard-label loss's weight) and --distill_temperature:
# Keras's Distiller's student weight and DistilBERT's temperature. benchmarks/distillation.py
# --sweep measured alpha 0, 0.5, 0.9 and T 1, 2, 4 in three settings (benchmarks/README.md,
# Distillation): no pair beat these in all by more than the seeds' spread (without transfer
# data T 1 led on one task and trailed on another; with transfer data it tied), so they stay,
# the settings every benchmark used. Here, in a module that imports no TensorFlow, so that a command's --help does
# not pay for it.
DEFAULT_ALPHA = 0.5
DEFAULT_TEMPERATURE = 2.0
# --distill_layer_map's default (intermediate.parse_layer_map): student layer i to teacher layer
# round(i * teacher / student), so the last maps to the last (TinyBERT's i -> i * k).
DEFAULT_LAYER_MAP = "uniform"
# The weight flags of the intermediate losses (features.py), each off (0) by default.
INTERMEDIATE_WEIGHT_FLAGS = ("distill_hidden_weight", "distill_attention_weight",
                             "distill_value_weight")


def flag_problems(teacher, alpha: float, temperature: float, do_train: bool,
                  alpha_is: str = "the hard-label loss's weight") -> list:
  """What is wrong with --distill_alpha, --distill_temperature and --teacher (which teaches a
  run that trains), one message per flag; alpha_is says what alpha weighs, for the message."""
  problems = []
  if not 0.0 <= alpha <= 1.0:
    problems.append(f"--distill_alpha must be in [0, 1] ({alpha_is}), got {alpha}")
  if not 0 < temperature < math.inf:
    problems.append(f"--distill_temperature must be positive and finite, got {temperature}")
  if not teacher:  # a value the run would not use: said, not ignored
    problems += [f"--{name}={value} weighs what a teacher teaches: add --teacher or drop it"
                 for name, value, default in (("distill_alpha", alpha, DEFAULT_ALPHA),
                                              ("distill_temperature", temperature,
                                               DEFAULT_TEMPERATURE))
                 if value != default and not problems]
  if teacher and not do_train:
    problems.append(f"--teacher={teacher} teaches a run that trains: add --do_train or drop "
                    "--teacher")
  return problems


def intermediate_flag_problems(settings) -> list:
  """What is wrong with the intermediate losses' flags (--distill_hidden_weight,
  --distill_attention_weight, --distill_value_weight, --distill_relation_heads) on their own,
  one message per flag: negative weights, weights without --teacher or with --cache_teacher
  (the cache keeps the head's outputs only; these losses read the teacher's layers in every
  step). The layer map and the relation heads' fit to both models are checked against the
  teacher's config (features.plan)."""
  problems = []
  on = []
  for name in INTERMEDIATE_WEIGHT_FLAGS:
    weight = getattr(settings, name)
    if not 0 <= weight < math.inf:
      problems.append(f"--{name} must be >= 0 and finite, got {weight}")
    elif weight > 0:
      on.append(f"--{name}={weight}")
  heads = settings.distill_relation_heads
  if heads is not None and heads < 1:
    problems.append(f"--distill_relation_heads must be positive, got {heads}")
  if settings.distill_layer_map != DEFAULT_LAYER_MAP and not settings.distill_hidden_weight > 0:
    problems.append(f"--distill_layer_map={settings.distill_layer_map} pairs the layers of the "
                    "hidden-state loss: add --distill_hidden_weight or drop it")
  if on and not settings.teacher:
    problems.append(f"{on[0]} distils from a teacher's layers: add --teacher")
  elif on and settings.cache_teacher:
    problems.append(f"{on[0]} reads the teacher's layers in every step but --cache_teacher "
                    "keeps only its head's outputs: drop one of the two")
  return problems
