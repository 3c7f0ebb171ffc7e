"""Learning-rate schedule, AdamWeightDecay, LAMB and gradient clipping.

The original's optimization.py (create_optimizer, AdamWeightDecayOptimizer).

The original release trains with Adam without bias correction plus decoupled weight decay,
a learning rate that warms up linearly and then decays linearly to zero, and gradients clipped
to a global norm of 1.0. This module reproduces those exactly as Keras 3 objects, and adds
LAMB (You et al. 2019, arXiv:1904.00962 v5) for large-batch training.

Which variables are decayed is decided once, when the optimizer is built, by a regular
expression search in each variable's Keras `path` (e.g. "layer_0/attention_LayerNorm/gamma",
"pooler/dense/bias"): the bare `name` ("gamma", "bias") carries no layer name, and under a
tf.distribute strategy `update_step` only sees the per-replica tf.Variable, whose name is not
the Keras path.
"""

import re
from typing import List, Optional, Sequence, Tuple

import keras
import tensorflow as tf

# The original's exclusions: LayerNorm scale/offset and every bias are not decayed.
DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")

OPTIMIZER_NAMES = ("adamw", "lamb")


# === Learning-rate schedule ===


@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
  """Linear warmup, then polynomial decay to `end_learning_rate` at `decay_steps`.

  With the defaults (power 1, end 0) this is the original's schedule:
    lr(step) = initial * step / warmup_steps                  if step < warmup_steps
    lr(step) = initial * (1 - min(step, decay_steps) / decay_steps)   otherwise.
  As in the original, the decay is counted from step 0 (not from the end of warmup) and the
  warmup value simply replaces it while step < warmup_steps, so the first update (step 0) uses
  a learning rate of 0 when there is a warmup.

  Args:
    initial_learning_rate: the peak learning rate.
    decay_steps: the step at which the decayed rate reaches `end_learning_rate`
      (num_train_steps); it stays there afterwards.
    warmup_steps: number of warmup steps (0 disables warmup).
    end_learning_rate: the rate at and after `decay_steps`.
    power: exponent of the polynomial decay (1.0 = linear).
    name: optional name of the schedule.
  """

  def __init__(self, initial_learning_rate: float, decay_steps: int, warmup_steps: int = 0,
               end_learning_rate: float = 0.0, power: float = 1.0, name: Optional[str] = None):
    super().__init__()
    if decay_steps <= 0:
      raise ValueError(f"decay_steps (num_train_steps) must be positive, got {decay_steps}")
    if warmup_steps < 0:
      raise ValueError(f"warmup_steps (num_warmup_steps) must be >= 0, got {warmup_steps}")
    self.initial_learning_rate = initial_learning_rate
    self.decay_steps = decay_steps
    self.warmup_steps = warmup_steps
    self.end_learning_rate = end_learning_rate
    self.power = power
    self.name = name

  def __call__(self, step):
    with tf.name_scope(self.name or "WarmupPolynomialDecay"):
      step = tf.cast(step, tf.float32)
      initial = tf.constant(self.initial_learning_rate, tf.float32)
      end = tf.constant(self.end_learning_rate, tf.float32)
      decay_steps = float(self.decay_steps)
      fraction_left = 1.0 - tf.minimum(step, decay_steps) / decay_steps
      decayed = (initial - end) * tf.pow(fraction_left, self.power) + end
      if not self.warmup_steps:
        return decayed
      warmup = initial * (step / float(self.warmup_steps))
      return tf.where(step < float(self.warmup_steps), warmup, decayed)

  def get_config(self):
    return {
        "initial_learning_rate": self.initial_learning_rate,
        "decay_steps": self.decay_steps,
        "warmup_steps": self.warmup_steps,
        "end_learning_rate": self.end_learning_rate,
        "power": self.power,
        "name": self.name,
    }


# === Optimizers ===


def _matches_any(path: str, patterns: Optional[Sequence[str]]) -> bool:
  return any(re.search(p, path) for p in (patterns or ()))


def _variable_path(variable) -> str:
  # Keras 3 variables have a `path` (layer scopes + name); plain tf.Variables only a name.
  path = getattr(variable, "path", None) or variable.name
  return path[:-2] if path.endswith(":0") else path


class _DecoupledDecayOptimizer(keras.optimizers.Optimizer):
  """Shared parts of AdamWeightDecay and Lamb: moments, decay exclusions, config.

  Keras' own `weight_decay` argument is not used: it shrinks the variable in a separate step
  before the update, while the original adds `weight_decay_rate * p` to the update itself.
  """

  def __init__(self, learning_rate, weight_decay_rate: float, beta_1: float, beta_2: float,
               epsilon: float, exclude_from_weight_decay: Optional[Sequence[str]], name: str,
               **kwargs):
    if kwargs.get("weight_decay") is not None:
      raise ValueError(f"{type(self).__name__} takes weight_decay_rate, not weight_decay "
                       "(Keras' decay is applied differently from the original's)")
    kwargs.pop("weight_decay", None)
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay_patterns = (
        None if exclude_from_weight_decay is None else tuple(exclude_from_weight_decay))

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    self._momentums, self._velocities = self.add_optimizer_variables(
        var_list, ["adam_m", "adam_v"])
    # Decided per variable index, in the order of var_list (= _get_variable_index).
    self._decay_flags = [
        bool(self.weight_decay_rate) and
        not _matches_any(_variable_path(v), self.exclude_from_weight_decay_patterns)
        for v in var_list]

  def exclude_from_weight_decay(self, var_list=None, var_names=None):
    # Keras' method configures its own weight_decay, which these optimizers do not use: refuse
    # it loudly rather than silently ignoring the call.
    raise TypeError(
        f"{type(self).__name__}: pass exclude_from_weight_decay=[patterns] to the constructor")

  def decays_variable(self, variable) -> bool:
    """Whether weight decay applies to `variable` (the optimizer must be built)."""
    return self._decay_flags[self._get_variable_index(variable)]

  def _moments(self, gradient, variable):
    """Updates and returns (m, v) of `variable` in the original's form."""
    index = self._get_variable_index(variable)
    m = self._momentums[index]
    v = self._velocities[index]
    beta_1 = tf.cast(self.beta_1, variable.dtype)
    beta_2 = tf.cast(self.beta_2, variable.dtype)
    next_m = beta_1 * m + (1.0 - beta_1) * gradient
    next_v = beta_2 * v + (1.0 - beta_2) * tf.square(gradient)
    self.assign(m, next_m)
    self.assign(v, next_v)
    return next_m, next_v

  def _decay(self, variable):
    """weight_decay_rate * p, or None for excluded variables."""
    if not self.decays_variable(variable):
      return None
    return tf.cast(self.weight_decay_rate, variable.dtype) * variable

  def get_config(self):
    config = super().get_config()
    config.pop("weight_decay", None)
    config.update({
        "weight_decay_rate": self.weight_decay_rate,
        "beta_1": self.beta_1,
        "beta_2": self.beta_2,
        "epsilon": self.epsilon,
        "exclude_from_weight_decay": (None if self.exclude_from_weight_decay_patterns is None
                                      else list(self.exclude_from_weight_decay_patterns)),
    })
    return config


def _dense(gradient, dtype):
  # Embedding gradients arrive as IndexedSlices; the moments are dense anyway (as in the
  # original), so the update is computed densely.
  return tf.cast(tf.convert_to_tensor(gradient), dtype)


def _resource(variable):
  """The resource handle of a Keras or tf.Variable, for raw training ops."""
  handle = getattr(variable, "handle", None)
  if handle is None:
    handle = variable.value.handle
  return handle


@keras.saving.register_keras_serializable(package="bert_tf")
class AdamWeightDecay(_DecoupledDecayOptimizer):
  """The original BERT optimizer: Adam without bias correction, decoupled weight decay.

    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g^2
    p = p - lr * (m / (sqrt(v) + epsilon) + weight_decay_rate * p)
  where the decay term is dropped for variables whose path matches any of
  `exclude_from_weight_decay` (regular expressions, searched).

  With bias_correction=True the moment term is Adam's (Kingma & Ba, with TensorFlow's and
  Keras' placement of epsilon), as in Keras' AdamW, Model Garden's and torch's AdamW:
    p = p - lr * (sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)
                  + weight_decay_rate * p)          (t = step + 1)
  Without it (the original), the early steps are larger at the same learning rate, by
  (1 - beta_1^t) / sqrt(1 - beta_2^t): 3.2x at the first step, 6.5x at step 10, 3.2x at step
  100, 1.26x at step 1,000 (beta_1 = 0.9, beta_2 = 0.999). Under the original's 10,000 warmup
  steps this hardly matters; with a short warmup from scratch it is a larger learning rate.

  Args:
    learning_rate: a float or a LearningRateSchedule (e.g. WarmupPolynomialDecay).
    weight_decay_rate: decoupled weight decay (0.01 in the original).
    beta_1, beta_2, epsilon: Adam's constants (the original's defaults).
    exclude_from_weight_decay: patterns of variable paths not decayed.
    bias_correction: Adam's bias correction of the moments (the original has none).
    name: optimizer name.
    **kwargs: other keras.optimizers.Optimizer arguments (e.g. gradient_accumulation_steps).
  """

  def __init__(self, learning_rate=0.001, weight_decay_rate: float = 0.01,
               beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
               exclude_from_weight_decay: Optional[Sequence[str]] =
               DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY, bias_correction: bool = False,
               name: str = "AdamWeightDecay", **kwargs):
    super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2, epsilon,
                     exclude_from_weight_decay, name, **kwargs)
    self.bias_correction = bool(bias_correction)

  def get_config(self):
    config = super().get_config()
    config["bias_correction"] = self.bias_correction
    return config

  def update_step(self, gradient, variable, learning_rate):
    # One fused kernel instead of about ten elementwise passes per variable: TensorFlow's
    # ResourceApplyAdam with both beta powers 0 has lr_t = lr * sqrt(1 - 0) / (1 - 0) = lr,
    # which is exactly the original's Adam without bias correction (epsilon added outside
    # the square root); with the beta powers beta^t it is Adam's corrected step. The
    # decoupled decay does not depend on the moments, so it is applied first as
    # p -= lr * weight_decay_rate * p; the sum equals the original's single update
    # p -= lr * (m / (sqrt(v) + epsilon) + weight_decay_rate * p) up to float rounding.
    # The decay is written p = p * (1 - lr * weight_decay_rate): an assignment of a fresh
    # tensor hands its buffer to the variable, half the time of assign_sub's second pass.
    dtype = variable.dtype
    gradient = _dense(gradient, dtype)
    lr = tf.cast(learning_rate, dtype)
    index = self._get_variable_index(variable)
    if self.decays_variable(variable):
      self.assign(variable, variable * (1 - lr * tf.cast(self.weight_decay_rate, dtype)))
    if self.bias_correction:
      t = tf.cast(self.iterations + 1, dtype)
      beta1_power = tf.pow(tf.cast(self.beta_1, dtype), t)
      beta2_power = tf.pow(tf.cast(self.beta_2, dtype), t)
    else:
      beta1_power = beta2_power = tf.zeros([], dtype)
    tf.raw_ops.ResourceApplyAdam(
        var=_resource(variable), m=_resource(self._momentums[index]),
        v=_resource(self._velocities[index]), beta1_power=beta1_power,
        beta2_power=beta2_power, lr=lr,
        beta1=tf.cast(self.beta_1, dtype), beta2=tf.cast(self.beta_2, dtype),
        epsilon=tf.cast(self.epsilon, dtype), grad=gradient, use_locking=False)


@keras.saving.register_keras_serializable(package="bert_tf")
class Lamb(_DecoupledDecayOptimizer):
  """LAMB (You et al. 2019, final version): layer-wise adaptive moments for large batches.

    m = beta_1 * m + (1 - beta_1) * g;  v = beta_2 * v + (1 - beta_2) * g^2
    m_hat = m / (1 - beta_1^t);  v_hat = v / (1 - beta_2^t)     (t = step + 1)
    r = m_hat / (sqrt(v_hat) + epsilon) + weight_decay_rate * p
    p = p - lr * (||p|| / ||r||) * r
  The trust ratio ||p|| / ||r|| (per variable, phi = identity) is 1 when either norm is 0 and
  for variables matching `exclude_from_layer_adaptation`; the decay term is dropped for
  variables matching `exclude_from_weight_decay`.

  Args:
    learning_rate: a float or a LearningRateSchedule.
    weight_decay_rate: decoupled weight decay.
    beta_1, beta_2, epsilon: moment constants.
    exclude_from_weight_decay: patterns of variable paths not decayed.
    exclude_from_layer_adaptation: patterns of variable paths updated without the trust
      ratio; None means the same as exclude_from_weight_decay.
    name: optimizer name.
    **kwargs: other keras.optimizers.Optimizer arguments.
  """

  def __init__(self, learning_rate=0.001, weight_decay_rate: float = 0.01,
               beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
               exclude_from_weight_decay: Optional[Sequence[str]] =
               DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
               exclude_from_layer_adaptation: Optional[Sequence[str]] = None,
               name: str = "Lamb", **kwargs):
    super().__init__(learning_rate, weight_decay_rate, beta_1, beta_2, epsilon,
                     exclude_from_weight_decay, name, **kwargs)
    self.exclude_from_layer_adaptation_patterns = (
        None if exclude_from_layer_adaptation is None else tuple(exclude_from_layer_adaptation))

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    patterns = self.exclude_from_layer_adaptation_patterns
    if patterns is None:
      patterns = self.exclude_from_weight_decay_patterns
    self._adapt_flags = [not _matches_any(_variable_path(v), patterns) for v in var_list]

  def adapts_variable(self, variable) -> bool:
    """Whether the trust ratio applies to `variable` (the optimizer must be built)."""
    return self._adapt_flags[self._get_variable_index(variable)]

  def update_step(self, gradient, variable, learning_rate):
    dtype = variable.dtype
    gradient = _dense(gradient, dtype)
    lr = tf.cast(learning_rate, dtype)
    m, v = self._moments(gradient, variable)
    t = tf.cast(self.iterations + 1, dtype)
    m_hat = m / (1.0 - tf.pow(tf.cast(self.beta_1, dtype), t))
    v_hat = v / (1.0 - tf.pow(tf.cast(self.beta_2, dtype), t))
    update = m_hat / (tf.sqrt(v_hat) + tf.cast(self.epsilon, dtype))
    decay = self._decay(variable)
    if decay is not None:
      update += decay
    if self.adapts_variable(variable):
      w_norm = tf.norm(tf.convert_to_tensor(variable))
      u_norm = tf.norm(update)
      ratio = tf.where((w_norm > 0.0) & (u_norm > 0.0), w_norm / u_norm,
                       tf.ones_like(w_norm))
      update = ratio * update
    self.assign_sub(variable, lr * update)

  def get_config(self):
    config = super().get_config()
    config["exclude_from_layer_adaptation"] = (
        None if self.exclude_from_layer_adaptation_patterns is None
        else list(self.exclude_from_layer_adaptation_patterns))
    return config


# === Gradient clipping ===


def global_norm(grads: Sequence[Optional[tf.Tensor]]) -> tf.Tensor:
  """sqrt of the sum of squares of every entry of every (non-None) gradient, in float32."""
  # tf.nn.l2_loss (sum of squares / 2) is one pass without a temporary; reduce_sum(square(g))
  # writes g^2 out first, which costs with Eigen kernels and TensorFlow's default allocator
  # (TF_ENABLE_ONEDNN_OPTS=0); benchmarks/README.md has the figures.
  squares = [2.0 * tf.nn.l2_loss(tf.cast(tf.convert_to_tensor(g), tf.float32))
             for g in grads if g is not None]
  if not squares:
    return tf.constant(0.0)
  return tf.sqrt(tf.add_n(squares))


def clip_by_global_norm(grads: Sequence[Optional[tf.Tensor]], clip_norm: float = 1.0,
                        cross_replica_sum: bool = True, loss_scale=None
                        ) -> Tuple[List[Optional[tf.Tensor]], tf.Tensor]:
  """Scales gradients so that the global norm of the applied gradient is at most clip_norm.

  Same scaling as the original (tf.clip_by_global_norm): g * clip_norm * min(1 / norm,
  1 / clip_norm). Call it once per optimizer update, on the gradient that is applied: with
  gradient accumulation, on the accumulated gradient, not on each micro-batch.

  Under a tf.distribute strategy (replica context, several replicas) a Keras 3 optimizer sums the
  gradients of all replicas inside `apply`. With `cross_replica_sum=True` the norm is therefore
  taken of that sum (one extra all-reduce) and each replica's share is scaled by the same
  factor, so the optimizer ends up applying the clipped total, exactly as on one device. Pass
  `cross_replica_sum=False` when `grads` already are the full gradient.

  With float16 dynamic loss scaling, the gradients handed to a LossScaleOptimizer are still
  multiplied by the loss scale (it divides them itself); pass that scale as `loss_scale`
  (`optimizer.dynamic_scale`) so the clip applies to the unscaled gradient. Non-finite
  gradients make all gradients NaN, so the LossScaleOptimizer still skips the step.

  Args:
    grads: gradients (None entries are passed through).
    clip_norm: the maximum global norm (1.0 in the original).
    cross_replica_sum: see above; ignored outside a multi-replica replica context.
    loss_scale: the factor the gradients are multiplied by, or None.

  Returns:
    (clipped gradients, the global norm of the unscaled gradient before clipping).
  """
  if loss_scale is not None:
    clip_norm = clip_norm * tf.cast(loss_scale, tf.float32)
  replica_context = tf.distribute.get_replica_context()
  if (cross_replica_sum and replica_context is not None
      and replica_context.num_replicas_in_sync > 1):
    present = [g for g in grads if g is not None]
    summed = replica_context.all_reduce(tf.distribute.ReduceOp.SUM,
                                        [tf.convert_to_tensor(g) for g in present])
    norm = global_norm(summed)
  else:
    norm = global_norm(grads)
  scale = clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm)
  # A non-finite norm makes every gradient NaN (as tf.clip_by_global_norm does), on every
  # replica: a LossScaleOptimizer that checks only the first replica's gradients then still
  # sees the overflow of another and skips the step.
  scale = tf.where(tf.math.is_finite(norm), scale, float("nan"))
  clipped = []
  for g in grads:
    if g is None:
      clipped.append(None)
    elif isinstance(g, tf.IndexedSlices):
      clipped.append(tf.IndexedSlices(g.values * tf.cast(scale, g.values.dtype), g.indices,
                                      g.dense_shape))
    else:
      clipped.append(g * tf.cast(scale, g.dtype))
  if loss_scale is not None:
    norm = norm / tf.cast(loss_scale, tf.float32)
  return clipped, norm


# === Factory ===


def create_optimizer(name: str, learning_rate: float, num_train_steps: int,
                     num_warmup_steps: int, weight_decay_rate: float = 0.01,
                     end_learning_rate: float = 0.0, power: float = 1.0,
                     beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                     exclude_from_weight_decay: Optional[Sequence[str]] =
                     DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
                     adam_bias_correction: bool = False,
                     loss_scale: bool = False, **kwargs) -> keras.optimizers.Optimizer:
  """The optimizer of the original release ("adamw") or LAMB ("lamb") with its schedule.

  Size: thirteen parameters, the optimizer flags of the commands, one each.

  Args:
    name: "adamw" or "lamb".
    learning_rate: peak learning rate.
    num_train_steps: the learning rate reaches end_learning_rate at this step.
    num_warmup_steps: linear warmup steps.
    weight_decay_rate, beta_1, beta_2, epsilon, exclude_from_weight_decay: optimizer
      constants (the original's defaults).
    end_learning_rate, power: the decay's end value and exponent (original: 0, 1).
    adam_bias_correction: "adamw" with Adam's bias correction (AdamWeightDecay's
      bias_correction; LAMB always corrects).
    loss_scale: wrap in keras.optimizers.LossScaleOptimizer (dynamic loss scaling for
      float16 mixed precision).
    **kwargs: further optimizer arguments (e.g. exclude_from_layer_adaptation for LAMB).

  Returns:
    A Keras optimizer. Build it inside `strategy.scope()` with
    `optimizer.build(model.trainable_variables)` before the first distributed step.
  """
  schedule = WarmupPolynomialDecay(learning_rate, num_train_steps, num_warmup_steps,
                                   end_learning_rate=end_learning_rate, power=power)
  common = dict(learning_rate=schedule, weight_decay_rate=weight_decay_rate, beta_1=beta_1,
                beta_2=beta_2, epsilon=epsilon,
                exclude_from_weight_decay=exclude_from_weight_decay, **kwargs)
  if name == "adamw":
    optimizer = AdamWeightDecay(bias_correction=adam_bias_correction, **common)
  elif name == "lamb":
    optimizer = Lamb(**common)
  else:
    raise ValueError(f"--optimizer must be one of {', '.join(OPTIMIZER_NAMES)}, got {name!r}")
  if loss_scale:
    optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
  return optimizer
