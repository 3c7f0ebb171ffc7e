"""Tests of bert_tf.training.optimization against NumPy references of the original
optimization.py (create_optimizer, AdamWeightDecayOptimizer) and of LAMB."""

import json
import os
import subprocess
import sys
import textwrap

from absl import flags
import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.training import optimization
from tests import helpers

REPO_ROOT = helpers.REPO_ROOT

# === NumPy references (the spec in code) ===


def reference_lr(step, init, num_train_steps, num_warmup_steps, end=0.0, power=1.0):
  """optimization.py:create_optimizer: polynomial decay from step 0, linear warmup while step < W."""
  decayed = (init - end) * (1.0 - min(step, num_train_steps) / num_train_steps) ** power + end
  if num_warmup_steps and step < num_warmup_steps:
    return init * step / num_warmup_steps
  return decayed


def excluded(path, patterns=("LayerNorm", "layer_norm", "bias")):
  return any(p in path for p in patterns)


def reference_adamw(params, grads_per_step, lrs, wd=0.01, beta_1=0.9, beta_2=0.999, eps=1e-6):
  """The original AdamWeightDecay: no bias correction, decay added to the update."""
  params = {k: v.astype(np.float32).copy() for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in params.items()}
  v = {k: np.zeros_like(p) for k, p in params.items()}
  f = np.float32
  for grads, lr in zip(grads_per_step, lrs):
    for k in params:
      g = grads[k]
      m[k] = f(beta_1) * m[k] + (f(1) - f(beta_1)) * g
      v[k] = f(beta_2) * v[k] + (f(1) - f(beta_2)) * g * g
      update = m[k] / (np.sqrt(v[k]) + f(eps))
      if not excluded(k):
        update = update + f(wd) * params[k]
      params[k] = params[k] - f(lr) * update
  return params


def reference_lamb(params, grads_per_step, lrs, wd=0.01, beta_1=0.9, beta_2=0.999, eps=1e-6):
  """LAMB (You et al. 2019, v5): bias-corrected moments, trust ratio ||p|| / ||r||."""
  params = {k: v.astype(np.float64).copy() for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in params.items()}
  v = {k: np.zeros_like(p) for k, p in params.items()}
  for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
    for k in params:
      g = grads[k].astype(np.float64)
      m[k] = beta_1 * m[k] + (1 - beta_1) * g
      v[k] = beta_2 * v[k] + (1 - beta_2) * g * g
      m_hat = m[k] / (1 - beta_1 ** t)
      v_hat = v[k] / (1 - beta_2 ** t)
      r = m_hat / (np.sqrt(v_hat) + eps)
      ratio = 1.0
      if not excluded(k):
        r = r + wd * params[k]
        w_norm, r_norm = np.linalg.norm(params[k]), np.linalg.norm(r)
        if w_norm > 0 and r_norm > 0:
          ratio = w_norm / r_norm
      params[k] = params[k] - lr * ratio * r
  return params


# === A small model whose variable paths look like the original's scopes ===


def small_model():
  """Dense "dense" -> LayerNormalization "LayerNorm" -> Dense "output" (paths like BERT's)."""
  keras.utils.set_random_seed(7)
  inputs = keras.Input((5,))
  x = keras.layers.Dense(7, name="dense")(inputs)
  x = keras.layers.LayerNormalization(name="LayerNorm")(x)
  outputs = keras.layers.Dense(3, name="output")(x)
  model = keras.Model(inputs, outputs)
  # Non-trivial LayerNorm parameters so that decaying them by mistake would show.
  for var in model.trainable_variables:
    var.assign(np.random.RandomState(len(var.path)).normal(size=var.shape).astype(np.float32))
  return model


def random_grads(model, steps, seed=0):
  rng = np.random.RandomState(seed)
  return [{v.path: rng.normal(size=v.shape).astype(np.float32) for v in model.trainable_variables}
          for _ in range(steps)]


def run_optimizer(optimizer, model, grads_per_step, step_fn=None):
  variables = model.trainable_variables
  optimizer.build(variables)

  def apply(grads):
    optimizer.apply(grads, variables)

  step_fn = step_fn or apply
  for grads in grads_per_step:
    step_fn([tf.constant(grads[v.path]) for v in variables])
  return {v.path: v.numpy() for v in variables}


# === Schedule ===


@pytest.mark.parametrize("power,end", [(1.0, 0.0), (2.0, 1e-5)])
def test_schedule_matches_reference(power, end):
  init, n, w = 1e-4, 100, 10
  schedule = optimization.WarmupPolynomialDecay(init, n, w, end_learning_rate=end, power=power)
  for step in [0, 1, w // 2, w - 1, w, w + 1, 37, n - 1, n, n + 10]:
    np.testing.assert_allclose(float(schedule(step)), reference_lr(step, init, n, w, end, power),
                               rtol=1e-6, atol=1e-12, err_msg=f"step {step}")


def test_schedule_golden_values():
  schedule = optimization.WarmupPolynomialDecay(1e-4, 100, 10)
  got = [float(schedule(s)) for s in (0, 5, 10, 55, 100, 110)]
  # Warmup 0 -> 5e-5; at W the decay (counted from step 0) takes over: 1e-4 * (1 - 10/100).
  np.testing.assert_allclose(got, [0.0, 5e-5, 9e-5, 4.5e-5, 0.0, 0.0], rtol=1e-6, atol=1e-12)


def test_schedule_without_warmup_starts_at_peak():
  schedule = optimization.WarmupPolynomialDecay(2e-5, 50, 0)
  np.testing.assert_allclose(float(schedule(0)), 2e-5, rtol=1e-7)
  np.testing.assert_allclose(float(schedule(25)), 1e-5, rtol=1e-6)


def test_schedule_rejects_bad_steps():
  with pytest.raises(ValueError, match="num_train_steps"):
    optimization.WarmupPolynomialDecay(1e-4, 0, 0)
  with pytest.raises(ValueError, match="num_warmup_steps"):
    optimization.WarmupPolynomialDecay(1e-4, 10, -1)


def test_schedule_serialization_round_trip():
  schedule = optimization.WarmupPolynomialDecay(3e-4, 1000, 100, end_learning_rate=1e-6,
                                                power=0.5)
  config = keras.optimizers.schedules.serialize(schedule)
  restored = keras.optimizers.schedules.deserialize(json.loads(json.dumps(config)))
  assert isinstance(restored, optimization.WarmupPolynomialDecay)
  assert restored.get_config() == schedule.get_config()
  for step in (0, 50, 100, 500, 1000):
    assert float(restored(step)) == float(schedule(step))


# === AdamWeightDecay and LAMB against the references ===


def test_decay_exclusions_use_variable_paths():
  model = small_model()
  optimizer = optimization.AdamWeightDecay(1e-3)
  optimizer.build(model.trainable_variables)
  decided = {v.path: optimizer.decays_variable(v) for v in model.trainable_variables}
  assert decided == {"dense/kernel": True, "dense/bias": False, "LayerNorm/gamma": False,
                     "LayerNorm/beta": False, "output/kernel": True, "output/bias": False}
  custom = optimization.AdamWeightDecay(1e-3, exclude_from_weight_decay=["output"])
  custom.build(model.trainable_variables)
  assert [custom.decays_variable(v) for v in model.trainable_variables] == [
      True, True, True, True, False, False]


def test_decay_exclusions_on_the_pretraining_model():
  from bert_tf.model import heads  # pylint: disable=g-import-not-at-top
  from bert_tf.config import BertConfig  # pylint: disable=g-import-not-at-top

  config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=24, max_position_embeddings=16)
  model = heads.build_pretraining_model(config)
  optimizer = optimization.create_optimizer("adamw", 1e-4, 10, 1)
  optimizer.build(model.trainable_variables)
  decayed = sorted(v.path for v in model.trainable_variables if optimizer.decays_variable(v))
  # Kernels and embedding tables only; every LayerNorm gamma/beta and bias is excluded.
  assert decayed
  assert all(not excluded(p) for p in decayed)
  assert all(p.endswith(("kernel", "embeddings")) for p in decayed), decayed
  num_layer_norm = sum("LayerNorm" in v.path for v in model.trainable_variables)
  assert num_layer_norm == 8  # embeddings, 2 per layer, MLM transform: gamma and beta each.


def test_adamw_matches_reference():
  model = small_model()
  initial = {v.path: v.numpy() for v in model.trainable_variables}
  schedule = optimization.WarmupPolynomialDecay(1e-2, 8, 2)
  steps = 6
  grads = random_grads(model, steps)
  got = run_optimizer(optimization.AdamWeightDecay(schedule), model, grads)
  lrs = [reference_lr(s, 1e-2, 8, 2) for s in range(steps)]
  want = reference_adamw(initial, grads, lrs)
  for path in want:
    np.testing.assert_allclose(got[path], want[path], rtol=1e-6, atol=1e-7, err_msg=path)
  # The weights moved, and decay made a difference where it applies.
  no_decay = reference_adamw(initial, grads, lrs, wd=0.0)
  assert np.abs(got["dense/kernel"] - initial["dense/kernel"]).max() > 1e-3
  assert np.abs(got["dense/kernel"] - no_decay["dense/kernel"]).max() > 1e-5


def test_adamw_first_step_without_warmup_is_sign_step():
  # No bias correction: after one step m / sqrt(v) = 0.1 g / sqrt(0.001 g^2) = sqrt(10) sign(g)
  # (1 - 0.999 in float32 is 0.0010000467: hence rtol 1e-5).
  var = keras.Variable(np.zeros(3, np.float32), name="bias")
  optimizer = optimization.AdamWeightDecay(0.1, epsilon=0.0)
  optimizer.apply([tf.constant([2.0, -3.0, 0.5])], [var])
  np.testing.assert_allclose(var.numpy(), [-0.1 * np.sqrt(10), 0.1 * np.sqrt(10),
                                           -0.1 * np.sqrt(10)], rtol=1e-5)


def test_adamw_with_bias_correction_matches_keras_adamw():
  """--adam_bias_correction: the update of Keras' AdamW (as Model Garden's and torch's AdamW:
  Adam's corrected moments, decoupled decay lr * rate * p), the same exclusions."""
  model_a, model_b = small_model(), small_model()
  schedule = optimization.WarmupPolynomialDecay(1e-2, 8, 2)
  grads = random_grads(model_a, 6, seed=4)
  got = run_optimizer(optimization.create_optimizer("adamw", 1e-2, 8, 2,
                                                    adam_bias_correction=True), model_a, grads)
  keras_adamw = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=0.01, beta_1=0.9,
                                       beta_2=0.999, epsilon=1e-6)
  keras_adamw.exclude_from_weight_decay(var_names=["LayerNorm", "bias"])
  want = run_optimizer(keras_adamw, model_b, grads)
  uncorrected = run_optimizer(optimization.AdamWeightDecay(schedule), small_model(), grads)
  for path in want:
    np.testing.assert_allclose(got[path], want[path], rtol=1e-5, atol=1e-7, err_msg=path)
    # Not the original's update: its first steps are larger.
    assert np.abs(uncorrected[path] - got[path]).max() > 1e-3, path


def test_adamw_with_bias_correction_first_step_is_lr_times_sign():
  # m_hat / sqrt(v_hat) = g / |g| at the first step: lr * sign(g), sqrt(10) times smaller than
  # the original's (test_adamw_first_step_without_warmup_is_sign_step).
  var = keras.Variable(np.zeros(3, np.float32), name="bias")
  optimizer = optimization.AdamWeightDecay(0.1, epsilon=0.0, bias_correction=True)
  optimizer.apply([tf.constant([2.0, -3.0, 0.5])], [var])
  np.testing.assert_allclose(var.numpy(), [-0.1, 0.1, -0.1], rtol=1e-5)


def test_lamb_matches_reference():
  model = small_model()
  initial = {v.path: v.numpy() for v in model.trainable_variables}
  schedule = optimization.WarmupPolynomialDecay(1e-2, 8, 2)
  steps = 6
  grads = random_grads(model, steps, seed=1)
  got = run_optimizer(optimization.Lamb(schedule), model, grads)
  want = reference_lamb(initial, grads, [reference_lr(s, 1e-2, 8, 2) for s in range(steps)])
  for path in want:
    np.testing.assert_allclose(got[path], want[path], rtol=2e-6, atol=1e-7, err_msg=path)


def test_lamb_trust_ratio_is_one_for_zero_weights():
  var = keras.Variable(np.zeros((2, 2), np.float32), name="kernel")
  optimizer = optimization.Lamb(0.5)
  optimizer.apply([tf.constant([[1.0, -1.0], [4.0, -0.25]])], [var])
  # ||p|| = 0 -> ratio 1: the bias-corrected first step is lr * sign(g) (up to epsilon).
  np.testing.assert_allclose(var.numpy(), [[-0.5, 0.5], [-0.5, 0.5]], rtol=1e-5)


def test_optimizers_serialization_round_trip():
  for optimizer in [optimization.create_optimizer("adamw", 1e-3, 20, 5, weight_decay_rate=0.02),
                    optimization.create_optimizer("adamw", 1e-3, 20, 5,
                                                  adam_bias_correction=True),
                    optimization.create_optimizer("lamb", 1e-3, 20, 5,
                                                  exclude_from_layer_adaptation=["bias"])]:
    config = keras.optimizers.serialize(optimizer)
    restored = keras.optimizers.deserialize(json.loads(json.dumps(config)))
    assert type(restored) is type(optimizer)
    assert restored.get_config() == optimizer.get_config()
    model_a, model_b = small_model(), small_model()
    grads = random_grads(model_a, 3, seed=2)
    got_a = run_optimizer(optimizer, model_a, grads)
    got_b = run_optimizer(restored, model_b, grads)
    for path in got_a:
      np.testing.assert_array_equal(got_a[path], got_b[path])


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_checkpoint_restores_slots_and_step(tmp_path, name):
  # Resuming from a tf.train.Checkpoint continues exactly as an uninterrupted run.
  grads = random_grads(small_model(), 4, seed=5)
  model, optimizer = small_model(), optimization.create_optimizer(name, 1e-2, 10, 2)
  run_optimizer(optimizer, model, grads[:2])
  path = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(tmp_path / "ckpt"))
  restored_model = small_model()
  restored = optimization.create_optimizer(name, 1e-2, 10, 2)
  restored.build(restored_model.trainable_variables)
  tf.train.Checkpoint(model=restored_model, optimizer=restored).restore(path).assert_consumed()
  assert int(restored.iterations.numpy()) == 2
  want = run_optimizer(optimizer, model, grads[2:])
  got = run_optimizer(restored, restored_model, grads[2:])
  for path_ in want:
    np.testing.assert_array_equal(got[path_], want[path_])


def test_create_optimizer_rejects_unknown_name():
  with pytest.raises(ValueError, match="adamw, lamb.*'sgd'"):
    optimization.create_optimizer("sgd", 1e-3, 10, 1)


def test_keras_weight_decay_argument_is_refused():
  with pytest.raises(ValueError, match="weight_decay_rate"):
    optimization.AdamWeightDecay(1e-3, weight_decay=0.1)


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_jit_compiled_step_matches_eager(name):
  model_a, model_b = small_model(), small_model()
  grads = random_grads(model_a, 3, seed=3)
  eager = run_optimizer(optimization.create_optimizer(name, 1e-2, 10, 1), model_a, grads)
  optimizer = optimization.create_optimizer(name, 1e-2, 10, 1)
  variables = model_b.trainable_variables

  @tf.function(jit_compile=True)
  def step(grads):
    optimizer.apply(grads, variables)

  jitted = run_optimizer(optimizer, model_b, grads, step_fn=step)
  for path in eager:
    np.testing.assert_allclose(jitted[path], eager[path], rtol=1e-5, atol=1e-6, err_msg=path)


# === Clipping ===


def test_clip_by_global_norm_matches_numpy():
  grads = [tf.constant([[3.0, 0.0], [0.0, 0.0]]), None, tf.constant([4.0])]
  clipped, norm = optimization.clip_by_global_norm(grads, 1.0)
  assert float(norm) == pytest.approx(5.0)
  assert clipped[1] is None
  np.testing.assert_allclose(clipped[0].numpy(), [[0.6, 0.0], [0.0, 0.0]], rtol=1e-6)
  np.testing.assert_allclose(clipped[2].numpy(), [0.8], rtol=1e-6)
  # Below the limit nothing changes.
  small, norm = optimization.clip_by_global_norm([tf.constant([0.3, 0.4])], 1.0)
  np.testing.assert_allclose(small[0].numpy(), [0.3, 0.4], rtol=1e-7)
  assert float(norm) == pytest.approx(0.5)
  # Sparse (embedding) gradients are scaled too.
  sparse = tf.IndexedSlices(tf.constant([[6.0, 8.0]]), tf.constant([1]), tf.constant([3, 2]))
  (out,), norm = optimization.clip_by_global_norm([sparse], 2.0)
  assert float(norm) == pytest.approx(10.0)
  np.testing.assert_allclose(tf.convert_to_tensor(out).numpy(), [[0, 0], [1.2, 1.6], [0, 0]],
                             rtol=1e-6)


def test_clip_of_a_non_finite_gradient_is_all_nan():
  grads = [tf.constant([1.0, np.inf]), tf.constant([2.0])]
  clipped, norm = optimization.clip_by_global_norm(grads, 1.0)
  assert np.isinf(float(norm))
  assert all(np.isnan(g.numpy()).all() for g in clipped)


def test_clip_with_loss_scale_clips_the_unscaled_gradient():
  grads = [tf.constant([3.0, 4.0]) * 1024.0]
  clipped, norm = optimization.clip_by_global_norm(grads, 1.0, loss_scale=1024.0)
  assert float(norm) == pytest.approx(5.0)
  np.testing.assert_allclose(clipped[0].numpy() / 1024.0, [0.6, 0.8], rtol=1e-6)


def test_loss_scale_optimizer_applies_unscaled_and_skips_non_finite():
  model_a, model_b = small_model(), small_model()
  grads = random_grads(model_a, 2, seed=4)
  want = run_optimizer(optimization.create_optimizer("adamw", 1e-2, 10, 0), model_a, grads)
  optimizer = optimization.create_optimizer("adamw", 1e-2, 10, 0, loss_scale=True)
  assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
  variables = model_b.trainable_variables
  optimizer.build(variables)
  scale = float(optimizer.dynamic_scale.numpy())

  def step(grads):
    scaled = [g * scale for g in grads]
    clipped, _ = optimization.clip_by_global_norm(scaled, 1e9, loss_scale=scale)
    optimizer.apply(clipped, variables)

  got = run_optimizer(optimizer, model_b, grads, step_fn=step)
  for path in want:
    np.testing.assert_allclose(got[path], want[path], rtol=1e-5, atol=1e-7, err_msg=path)
  # An overflowing step changes nothing but halves the scale.
  before = [v.numpy() for v in variables]
  bad = [tf.fill(v.shape, np.inf) for v in variables]
  clipped, _ = optimization.clip_by_global_norm(bad, 1.0, loss_scale=scale)
  optimizer.apply(clipped, variables)
  for var, old in zip(variables, before):
    np.testing.assert_array_equal(var.numpy(), old)
  assert float(optimizer.dynamic_scale.numpy()) == scale / 2


# === Two replicas give the one-device result ===

_MIRRORED_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    from bert_tf.training import optimization

    GLOBAL_BATCH = 8
    rng = np.random.RandomState(0)
    features = rng.normal(size=(3, GLOBAL_BATCH, 5)).astype(np.float32)
    targets = rng.normal(size=(3, GLOBAL_BATCH, 3)).astype(np.float32) * 10

    def build_model():
      keras.utils.set_random_seed(1)
      inputs = keras.Input((5,))
      x = keras.layers.Dense(6, name="dense")(inputs)
      x = keras.layers.LayerNormalization(name="LayerNorm")(x)
      return keras.Model(inputs, keras.layers.Dense(3, name="output")(x))

    def train(strategy, name, loss_scale=False):
      with strategy.scope():
        model = build_model()
        optimizer = optimization.create_optimizer(name, 1e-2, 10, 1, loss_scale=loss_scale)
        optimizer.build(model.trainable_variables)

      def replica_step(x, y):
        with tf.GradientTape() as tape:
          per_example = tf.reduce_sum(tf.square(model(x) - y), axis=-1)
          loss = tf.reduce_sum(per_example) / GLOBAL_BATCH
          if loss_scale:
            loss = optimizer.scale_loss(loss)
        grads = tape.gradient(loss, model.trainable_variables)
        # The loss is large, so a clip of 1.0 is active on every step.
        grads, norm = optimization.clip_by_global_norm(
            grads, 1.0, loss_scale=optimizer.dynamic_scale if loss_scale else None)
        optimizer.apply(grads, model.trainable_variables)
        return norm

      @tf.function
      def step(x, y):
        return strategy.run(replica_step, args=(x, y))

      norms = []
      for x, y in zip(features, targets):
        dataset = tf.data.Dataset.from_tensors((x, y)).unbatch().batch(GLOBAL_BATCH)
        batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
        norm = strategy.experimental_local_results(step(*batch))
        norms.append([float(n) for n in norm])
      return norms, {v.path: v.numpy().tolist() for v in model.trainable_variables}

    out = {}
    for name in ("adamw", "lamb"):
      mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
      assert mirrored.num_replicas_in_sync == 2
      out[name] = {"mirrored": train(mirrored, name),
                   "single": train(tf.distribute.get_strategy(), name)}
    # float16-style dynamic loss scaling (power-of-two scale: exact in float32).
    out["adamw_loss_scale"] = {"mirrored": train(mirrored, "adamw", loss_scale=True),
                               "single": out["adamw"]["single"]}
    print("RESULT" + json.dumps(out))
""")


@pytest.mark.slow
def test_mirrored_two_replicas_match_one_device():
  """AdamWeightDecay, LAMB and a LossScaleOptimizer on 2 logical CPUs equal one device."""
  env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run([sys.executable, "-c", _MIRRORED_SCRIPT], capture_output=True,
                        text=True, env=env, cwd=REPO_ROOT, timeout=300)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT")]
  assert proc.returncode == 0 and lines, proc.stderr[-3000:]
  out = json.loads(lines[-1][len("RESULT"):])
  for name, runs in out.items():
    mirrored_norms, mirrored_weights = runs["mirrored"]
    single_norms, single_weights = runs["single"]
    # Both replicas see the norm of the summed gradient, equal to the one-device norm (> 1).
    for pair, (single,) in zip(mirrored_norms, single_norms):
      assert single > 1.0
      np.testing.assert_allclose(pair, [single, single], rtol=1e-5)
    for path, value in single_weights.items():
      np.testing.assert_allclose(mirrored_weights[path], value, rtol=1e-5, atol=1e-6,
                                 err_msg=f"{name} {path}")


def test_keras_weight_decay_configuration_is_refused_not_ignored():
  for cls in (optimization.AdamWeightDecay, optimization.Lamb):
    opt = cls(learning_rate=1e-3)
    with pytest.raises(TypeError, match="pass exclude_from_weight_decay"):
      opt.exclude_from_weight_decay(var_names=["bias"])


def test_every_training_command_passes_adam_bias_correction_to_its_optimizer(tmp_path):
  from bert_tf import cli  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_tf import run_classifier, run_ner, run_pretraining, run_squad
  from bert_tf.model.heads import build_pretraining_model  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks.squad import run as squad_run  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_tf.training import distribution, loop, pretraining
  required = {run_pretraining: ["--input_file=i", "--output_dir=o", "--bert_config_file=c"],
              run_classifier: ["--task_name=generic", "--data_dir=d", "--vocab_file=v",
                               "--output_dir=o", "--label_list=a,b"],
              run_squad: ["--vocab_file=v", "--output_dir=o"],
              run_ner: ["--vocab_file=v", "--output_dir=o"]}
  settings_of = {run_pretraining: lambda f: cli.settings_from_flags(
                     pretraining.PretrainingSettings, f),
                 run_classifier: run_classifier.settings_from_flags,
                 run_squad: lambda f: cli.settings_from_flags(squad_run.SquadSettings, f),
                 run_ner: run_ner.settings_from_flags}
  for module, args in required.items():
    for extra, want in (([], False), (["--adam_bias_correction"], True)):
      flag_values = flags.FlagValues()
      module.define_flags(flag_values)
      flag_values([module.__name__, *args, *extra])
      assert settings_of[module](flag_values).adam_bias_correction is want, module.__name__

  for want in (False, True):
    settings = helpers.tiny_settings(str(tmp_path / "data"), str(tmp_path / f"run_{want}"),
                                     adam_bias_correction=want)
    run = loop.prepare_run(distribution.select_strategy("one_device"),
                           lambda: build_pretraining_model(helpers.tiny_config()),
                           pretraining.TASK, settings, 10, 2, chief=True)
    assert isinstance(run.optimizer, optimization.AdamWeightDecay)
    assert run.optimizer.bias_correction is want
