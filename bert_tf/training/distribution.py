"""Where a run computes: the tf.distribute strategy, the chief, CPU towers, the replicas' share of
a batch, the dtype policy, and the iterators every loop reads its data through.

Batch sizes are global: `train_batch_size` examples go into every optimizer update, split over
the replicas (per_replica) and, with gradient accumulation, over micro-batches per replica.
"""

import contextlib
import json
import os
from typing import Callable, NamedTuple, Optional

from absl import logging
import tensorflow as tf

from bert_tf.model import layers
from bert_tf.training import record_files
from bert_tf.training.errors import TrainingError


STRATEGY_NAMES = ("tpu", "mirrored", "multi_worker_mirrored", "one_device")
MIXED_PRECISION_POLICIES = {"none": "float32", "bfloat16": "mixed_bfloat16",
                            "float16": "mixed_float16"}


# === Strategy ===


def _num_workers_in_tf_config() -> int:
  try:
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
  except json.JSONDecodeError as e:
    raise TrainingError(f"the TF_CONFIG environment variable is not valid JSON: {e}") from None
  return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def select_strategy(strategy_name: Optional[str] = None, use_tpu: bool = False,
                    tpu_name: Optional[str] = None, tpu_zone: Optional[str] = None,
                    gcp_project: Optional[str] = None, master: Optional[str] = None,
                    num_tpu_cores: int = 8) -> tf.distribute.Strategy:
  """The tf.distribute strategy to train with.

  Without a name it is chosen from the original's flags and the machine: use_tpu -> tpu;
  TF_CONFIG naming several workers -> multi_worker_mirrored; several GPUs -> mirrored;
  otherwise one_device. "mirrored" on a machine without GPUs mirrors over the logical CPU
  devices (several only if configured with tf.config.set_logical_device_configuration).

  Args:
    strategy_name: one of STRATEGY_NAMES, or None to choose as above.
    use_tpu, tpu_name, tpu_zone, gcp_project, master: the original's TPU flags; the TPU
      address is tpu_name, else master.
    num_tpu_cores: checked against the TPU found (the strategy uses all its cores).

  Returns:
    A tf.distribute.Strategy.

  Raises:
    TrainingError: an unknown name, or a TPU that cannot be reached.
  """
  if strategy_name is None:
    if use_tpu:
      strategy_name = "tpu"
    elif _num_workers_in_tf_config() > 1:
      strategy_name = "multi_worker_mirrored"
    elif len(tf.config.list_logical_devices("GPU")) > 1:
      strategy_name = "mirrored"
    else:
      strategy_name = "one_device"
  if strategy_name not in STRATEGY_NAMES:
    raise TrainingError(f"--strategy must be one of {', '.join(STRATEGY_NAMES)}, got "
                        f"{strategy_name!r}")
  if strategy_name == "tpu":
    address = tpu_name or master
    try:
      resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
          tpu=address, zone=tpu_zone, project=gcp_project)
      tf.config.experimental_connect_to_cluster(resolver)
      tf.tpu.experimental.initialize_tpu_system(resolver)
      strategy = tf.distribute.TPUStrategy(resolver)
    except Exception as e:  # pylint: disable=broad-except
      # The resolver raises several unrelated types (ValueError, RuntimeError, NotFoundError).
      raise TrainingError(
          f"--use_tpu/--strategy=tpu: cannot reach a TPU (tpu_name={tpu_name!r}, "
          f"master={master!r}, tpu_zone={tpu_zone!r}, gcp_project={gcp_project!r}): "
          f"{type(e).__name__}: {e}") from None
    if strategy.num_replicas_in_sync != num_tpu_cores:
      logging.warning("The TPU has %d cores; --num_tpu_cores=%d is ignored (all are used)",
                      strategy.num_replicas_in_sync, num_tpu_cores)
    return strategy
  if strategy_name == "multi_worker_mirrored":
    # A bounded wait for the other tasks, which SIGTERM stops (see training/cluster.py).
    from bert_tf.training import cluster  # pylint: disable=g-import-not-at-top
    return cluster.create_multi_worker_strategy(tf.distribute.MultiWorkerMirroredStrategy)
  gpus = tf.config.list_logical_devices("GPU")
  if strategy_name == "mirrored":
    devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
    return tf.distribute.MirroredStrategy(devices=devices)
  return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """Whether this process writes checkpoints, summaries and results (task 0 / the chief)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  return task_type in (None, "chief") or (task_type == "worker" and task_id == 0 and
                                          "chief" not in resolver.cluster_spec().as_dict())


class BatchShares(NamedTuple):
  """A global batch and its shares: the one place a batch is divided over the replicas and
  the micro-batches of gradient accumulation (floor division, as tf.distribute's
  InputContext.get_per_replica_batch_size; the settings' checks refuse sizes that do not
  divide).

  Attributes:
    global_batch: examples per optimizer update (or per eval / predict batch), all replicas.
    replicas: the replicas the batch is split over.
    accumulation: micro-batches per update (--gradient_accumulation_steps).
  """
  global_batch: int
  replicas: int = 1
  accumulation: int = 1

  @property
  def per_replica(self) -> int:
    """Examples per replica per update."""
    return self.global_batch // self.replicas

  @property
  def micro_batch(self) -> int:
    """Examples per micro-batch over all replicas: what a dataset is asked for with an
    InputContext, which takes each replica's share of it."""
    return self.global_batch // self.accumulation

  @property
  def micro_batch_per_replica(self) -> int:
    """Examples per micro-batch on one replica: what a replica's step sees."""
    return self.per_replica // self.accumulation


def use_cpu_towers(towers: int) -> bool:
  """TensorFlow's threads for Trainer's towers on a CPU: one intra-op thread (each op on one
  core) and `towers` inter-op threads (the towers side by side). Must run before TensorFlow
  executes anything; returns False, with a warning, when it is too late (the towers then run
  on the threads TensorFlow already has: the same update, without the speed-up)."""
  if towers <= 1:
    return True
  try:
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(towers)
  except RuntimeError as e:
    logging.warning("--cpu_towers=%d: TensorFlow's threads are already set up (%s); the "
                    "towers run on its %d intra-op and %d inter-op threads", towers, e,
                    tf.config.threading.get_intra_op_parallelism_threads(),
                    tf.config.threading.get_inter_op_parallelism_threads())
    return False
  return True


def check_cpu_only(strategy, towers: int) -> None:
  """TrainingError when towers > 1 would run on GPUs or TPUs (towers are for CPUs: an
  accelerator's ops already keep it busy)."""
  if towers <= 1:
    return
  devices = [d for d in strategy.extended.worker_devices
             if tf.DeviceSpec.from_string(d).device_type not in (None, "CPU")]
  if devices:
    raise TrainingError(f"--cpu_towers={towers} is for training on CPUs; this run's strategy "
                        f"places replicas on {', '.join(devices)}: leave it at 1")


def resumed_iterator(strategy, dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset],
                     global_step: tf.Variable):
  """An iterator (data_iterator) over dataset_fn's batches, positioned at global_step
  (resume by skip).

  tf.distribute iterators cannot be checkpointed (TF 2.20), so the data position is the step: a
  resumed run skips the batches (updates) already used. With a seeded, deterministic dataset
  the resumed run sees exactly the batches an uninterrupted run would.

  Args:
    strategy: the run's strategy.
    dataset_fn: InputContext -> the per-replica dataset of one element per update.
    global_step: the restored step.
  """
  skip = int(global_step.numpy())

  def positioned(ctx):
    dataset = dataset_fn(ctx)
    return dataset.skip(skip) if skip else dataset

  return data_iterator(strategy, positioned)


def data_iterator(strategy, dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset]):
  """An iterator over dataset_fn's batches for the replicas of `strategy`: every training,
  eval and predict loop of the package reads its data through one.

  Both ways keep tf.data's autotuning model off in every dataset the iterator reads, because
  deleting an iterator with that model on can block for up to a minute in TensorFlow 2.20
  (record_files.prefetched says why). The model is turned off here in whatever dataset_fn
  returns (the package's pipelines already have it off; a caller's own dataset may not), and:
  - A OneDeviceStrategy (one CPU or one GPU) gets the dataset's own iterator, made on the host
    CPU; the step copies each batch to the device, a few hundred kilobytes for BERT's int32
    features.
  - Other strategies get strategy.distribute_datasets_from_function's iterator. It wraps each
    device's share in a dataset of its own (a prefetch on the device), built with default
    options, which turn the model back on; TensorFlow has no option to reach them, so while
    the iterator is made its private helper multi_device_iterator_ops._create_device_dataset
    is wrapped to turn the model off in them (_device_datasets_without_autotuning).
  """
  def dataset_without_autotuning(ctx):
    return record_files.autotuning_off(dataset_fn(ctx))

  if isinstance(strategy, tf.distribute.OneDeviceStrategy):
    with tf.device("/cpu:0"):
      return iter(dataset_without_autotuning(tf.distribute.InputContext()))
  with _device_datasets_without_autotuning():
    return iter(strategy.distribute_datasets_from_function(dataset_without_autotuning))


@contextlib.contextmanager
def _device_datasets_without_autotuning():
  """Within the block, the per-device datasets that tf.distribute's iterators make have
  tf.data's autotuning model off (see data_iterator). Without TensorFlow's helper (another
  version), the block changes nothing, and tests/training/test_loop.py fails, naming it."""
  # pylint: disable=g-import-not-at-top,protected-access
  from tensorflow.python.data.ops import multi_device_iterator_ops
  original = getattr(multi_device_iterator_ops, "_create_device_dataset", None)
  if original is None:
    yield
    return

  def create_device_dataset(*args, **kwargs):
    return record_files.autotuning_off(original(*args, **kwargs))

  multi_device_iterator_ops._create_device_dataset = create_device_dataset
  try:
    yield
  finally:
    multi_device_iterator_ops._create_device_dataset = original


def dtype_policy(mixed_precision: str):
  """Keras' dtype policy for a run (--mixed_precision) inside a `with` block, the previous one
  restored afterwards (model.layers.dtype_policy, the one helper)."""
  return layers.dtype_policy(MIXED_PRECISION_POLICIES[mixed_precision])
