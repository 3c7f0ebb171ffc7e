"""Shared test fixtures: paths, tiny models and records, and the NumPy reference of BERT.

Imported by test modules as `from tests import helpers`; nothing here is a test.

The reference functions (float64, weights keyed by the original TF1 names that
modeling.py:BertModel and run_pretraining.py create) are the specification in code: the model,
head and checkpoint tests compare against them.
"""

import hashlib
import math
import os
import re
import shutil

import numpy as np
import tensorflow as tf

from bert_tf import record_schema
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model.checkpoints import original_variable_shapes
from bert_tf.training import pretraining

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_DATA = os.path.join(REPO_ROOT, "tests", "data")
# Put on a subprocess's PYTHONPATH: its sitecustomize makes scikit-learn and matplotlib look
# uninstalled, as in a user's install of bert_tf (see the module; 1.9 s less start-up a process).
SUBPROCESS_SITE = os.path.join(REPO_ROOT, "tests", "subprocess_site")


def subprocess_env(**extra):
  """The environment for a subprocess that runs bert_tf from this checkout (and starts as a
  user's install of it does: SUBPROCESS_SITE)."""
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO_ROOT, SUBPROCESS_SITE,
                                                      os.environ.get("PYTHONPATH", "")]),
             TF_CPP_MIN_LOG_LEVEL="2")
  env.update(extra)
  return env


def user_env(**extra):
  """subprocess_env as a user's shell has it: no TF_CPP_MIN_LOG_LEVEL, no verbose logs, no
  tracebacks (unless `extra` sets them), so the command's own log filter (bert_tf/logs.py) is
  what keeps TensorFlow's routine lines out of its output."""
  from bert_tf import logs  # pylint: disable=g-import-not-at-top
  env = subprocess_env(**extra)
  for name in ("TF_CPP_MIN_LOG_LEVEL", logs.VERBOSE_ENV, "BERT_TF_TRACEBACK"):
    if name not in extra:
      env.pop(name, None)
  return env


def run_folder_at_step(source, target, step: int):
  """A copy of run folder `source` at `target` as a run interrupted after its step-`step`
  checkpoint leaves it: the later checkpoints' files removed and the checkpoint index naming
  ckpt-`step` (for the resume tests: the same command on `target` resumes from there).
  Returns target."""
  shutil.copytree(source, target)
  for name in os.listdir(target):
    found = re.match(r"ckpt-(\d+)\.", name)
    if found and int(found.group(1)) > step:
      os.remove(os.path.join(target, name))
  assert os.path.exists(os.path.join(target, f"ckpt-{step}.index")), os.listdir(target)
  with open(os.path.join(target, "checkpoint"), "w", encoding="utf-8") as f:
    f.write(f'model_checkpoint_path: "ckpt-{step}"\nall_model_checkpoint_paths: "ckpt-{step}"\n')
  return target


def load_script(name: str):
  """data_prep/<name>.py loaded as a module (the scripts are not an installed package)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  path = os.path.join(REPO_ROOT, "data_prep", f"{name}.py")
  spec = importlib.util.spec_from_file_location(f"data_prep_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def run_cli_in_process(module, argv):
  """Runs a tool's define_flags + main through cli.run on fresh flags; returns the exit code.

  The module's FLAGS is swapped for a new FlagValues, so the run neither sees nor leaves flags
  of other tools (faster than a subprocess, which pays for importing TensorFlow).
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  from bert_tf import cli  # pylint: disable=g-import-not-at-top
  flag_values = flags.FlagValues()
  saved = module.FLAGS
  module.FLAGS = flag_values
  try:
    cli.run(module.main, module.define_flags, argv[0], argv=argv, flag_values=flag_values)
  except SystemExit as e:
    return e.code
  finally:
    module.FLAGS = saved
  raise AssertionError("cli.run returned instead of exiting")


# === The NumPy reference of the original formulas ===

# Tiny, odd-sized config: every dimension differs, so a transposed kernel cannot go unnoticed.
ODD_CONFIG = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=16, type_vocab_size=3)


# === NumPy reference (the original's formulas) ===
def ref_gelu(x):
  return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def ref_layer_norm(x, gamma, beta, eps=1e-12):
  mean = x.mean(axis=-1, keepdims=True)
  var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * gamma + beta


def ref_softmax(x):
  e = np.exp(x - x.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def ref_attention(w, prefix, x, mask, num_heads):
  """Self-attention of one layer with the original's -10000 mask adder; x [B, S, H]."""
  b, s, h = x.shape
  d = h // num_heads

  def heads(name):
    y = x @ w[f"{prefix}/self/{name}/kernel"] + w[f"{prefix}/self/{name}/bias"]
    return y.reshape(b, s, num_heads, d).transpose(0, 2, 1, 3)  # [B, N, S, D]

  q, k, v = heads("query"), heads("key"), heads("value")
  scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
  scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
  context = (ref_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
  return context @ w[f"{prefix}/output/dense/kernel"] + w[f"{prefix}/output/dense/bias"]


def ref_encoder(w, config, ids, mask, types, act=ref_gelu):
  """Returns (sequence_output, pooled_output, per-layer outputs) of the original model."""
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  mask = np.asarray(mask, np.float64)
  s = ids.shape[1]
  x = (w["bert/embeddings/word_embeddings"][ids]
       + w["bert/embeddings/token_type_embeddings"][types]
       + w["bert/embeddings/position_embeddings"][:s][None])
  x = ref_layer_norm(x, w["bert/embeddings/LayerNorm/gamma"], w["bert/embeddings/LayerNorm/beta"])
  all_layers = []
  for n in range(config.num_hidden_layers):
    p = f"bert/encoder/layer_{n}"
    a = ref_attention(w, f"{p}/attention", x, mask, config.num_attention_heads)
    x = ref_layer_norm(a + x, w[f"{p}/attention/output/LayerNorm/gamma"],
                       w[f"{p}/attention/output/LayerNorm/beta"])
    f = act(x @ w[f"{p}/intermediate/dense/kernel"] + w[f"{p}/intermediate/dense/bias"])
    f = f @ w[f"{p}/output/dense/kernel"] + w[f"{p}/output/dense/bias"]
    x = ref_layer_norm(f + x, w[f"{p}/output/LayerNorm/gamma"], w[f"{p}/output/LayerNorm/beta"])
    all_layers.append(x)
  pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
  return x, pooled, all_layers


def ref_pretraining_heads(w, sequence_output, pooled_output, positions, act=ref_gelu):
  """Returns (masked_lm_logits [B, P, V], next_sentence_logits [B, 2]) of the original heads."""
  w = {k: np.asarray(v, np.float64) for k, v in w.items()}
  gathered = np.take_along_axis(sequence_output, positions[:, :, None], axis=1)  # [B, P, H]
  t = act(gathered @ w["cls/predictions/transform/dense/kernel"]
          + w["cls/predictions/transform/dense/bias"])
  t = ref_layer_norm(t, w["cls/predictions/transform/LayerNorm/gamma"],
                     w["cls/predictions/transform/LayerNorm/beta"])
  mlm = t @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
  nsp = (pooled_output @ w["cls/seq_relationship/output_weights"].T
         + w["cls/seq_relationship/output_bias"])
  return mlm, nsp


def random_original_weights(config, rng, heads=True):
  """Random values for every original variable; LayerNorm and biases are not left at 1 / 0."""
  values = {}
  for name, shape in original_variable_shapes(config, heads=heads).items():
    if name.endswith("gamma"):
      values[name] = 1.0 + 0.1 * rng.standard_normal(shape)
    else:
      values[name] = 0.2 * rng.standard_normal(shape)
    values[name] = values[name].astype(np.float32)
  return values


def random_inputs(config, rng, batch=3, seq=7, predictions=4):
  """Token ids, a padded mask (row lengths seq, seq - 2, 1), type ids and masked positions."""
  ids = rng.integers(0, config.vocab_size, size=(batch, seq)).astype(np.int32)
  lengths = [seq, seq - 2, 1][:batch] + [seq] * max(0, batch - 3)
  mask = np.array([[1 if j < n else 0 for j in range(seq)] for n in lengths], np.int32)
  ids = ids * mask
  types = (rng.integers(0, config.type_vocab_size, size=(batch, seq)) * mask).astype(np.int32)
  positions = rng.integers(0, seq, size=(batch, predictions)).astype(np.int32)
  return ids, mask, types, positions


# === Tiny pretraining runs ===
# A tiny model (L=2, H=64, A=2, I=37, vocab 64) and tiny records (sequence 16, 3 predictions),
# with dropout off so that runs can be compared number for number.

SEQ = 16
PREDS = 3
VOCAB = 64
# [PAD] [UNK] [CLS] [SEP] [MASK] then words.
VOCAB_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, VOCAB)]
# md5 of the file write_vocab writes: make_records' data records it as its vocab_md5.
TINY_VOCAB_MD5 = hashlib.md5(("\n".join(VOCAB_TOKENS) + "\n").encode("utf-8")).hexdigest()


def tiny_config(**changes) -> BertConfig:
  values = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=37, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                max_position_embeddings=32)
  values.update(changes)
  return BertConfig(**values)


def make_records(path: str, num_examples: int = 64, seed: int = 0, seq: int = SEQ,
                 preds: int = PREDS) -> str:
  """Writes random pretraining instances plus a matching metadata file; returns path.

  The next-sentence label is 1 exactly when segment A is shorter than 4 tokens, and segment B
  repeats A's first token, so both heads have something learnable.
  """
  rng = np.random.RandomState(seed)
  encoder = record_schema.ExampleEncoder(seq, preds, VOCAB)
  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(num_examples):
      len_a, len_b = rng.randint(2, 6), rng.randint(2, 6)
      a = list(rng.randint(5, VOCAB, len_a))
      b = [a[0]] + list(rng.randint(5, VOCAB, len_b - 1))
      ids = [2] + a + [3] + b + [3]
      candidates = [p for p in range(len(ids)) if ids[p] > 4]
      positions = sorted(rng.choice(candidates, preds, replace=False))
      labels = [ids[p] for p in positions]
      for p in positions:
        ids[p] = 4
      writer.write(encoder.encode(ids, len_a + 2, positions, labels, len_a < 4))
  metadata = record_schema.make_metadata(
      max_seq_length=seq, max_predictions_per_seq=preds, use_v2_feature_names=False,
      vocab_size=VOCAB, vocab_md5=TINY_VOCAB_MD5, do_lower_case=True, do_whole_word_mask=False,
      flags={}, counts={"instances": num_examples}, program_version="tests")
  record_schema.write_metadata(record_schema.metadata_path(path), metadata)
  return path


def write_vocab(path: str) -> str:
  """The tiny vocab of make_records' data (its md5 is the data's vocab_md5)."""
  with open(path, "w") as f:
    f.write("\n".join(VOCAB_TOKENS) + "\n")
  return path


def tiny_settings(data: str, output_dir: str, **changes) -> pretraining.PretrainingSettings:
  values = dict(input_file=data, output_dir=output_dir, max_seq_length=SEQ,
                max_predictions_per_seq=PREDS, do_train=True, train_batch_size=8,
                eval_batch_size=8, learning_rate=1e-3, num_train_steps=6, num_warmup_steps=0,
                save_checkpoints_steps=2, iterations_per_loop=2, max_eval_steps=4,
                export_at_end=False, seed=7, keep_checkpoint_max=10)
  values.update(changes)
  return pretraining.PretrainingSettings(**values)


def checkpoint_values(path: str, config: BertConfig = None):
  """Original name -> array of the model weights in one of our training checkpoints."""
  return checkpoints.read_training_checkpoint(path, config or tiny_config())


def optimizer_values(path: str):
  """Checkpoint key -> array of every optimizer variable (slots, iterations)."""
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith("optimizer/")}


def assert_same_weights(a, b, rtol=1e-5, atol=1e-6):
  assert sorted(a) == sorted(b)
  assert len(a) > 10
  for name in a:
    np.testing.assert_allclose(a[name], b[name], rtol=rtol, atol=atol, err_msg=name)


def _read_varint(data, pos):
  value, shift = 0, 0
  while True:
    byte = data[pos]
    pos += 1
    value |= (byte & 0x7F) << shift
    shift += 7
    if byte < 0x80:
      return value, pos


def protobuf_fields(data):
  """Length-delimited fields of a protobuf message: [(field number, bytes)]."""
  pos, fields = 0, []
  while pos < len(data):
    key, pos = _read_varint(data, pos)
    assert key & 7 == 2, "only length-delimited fields are written"
    size, pos = _read_varint(data, pos)
    fields.append((key >> 3, data[pos:pos + size]))
    pos += size
  return fields


def assert_empty_requests_give_empty_results(loaded) -> int:
  """Every serving signature of a loaded SavedModel answers a 0-row batch with 0-row outputs,
  and a signature on token ids answers sequence length 0 with length-0 outputs (and a zero
  pooled_output). Returns the number of calls checked."""
  calls = 0
  for name, function in loaded.signatures.items():
    specs = function.structured_input_signature[1]
    empty = {key: tf.zeros([0] * spec.shape.rank, spec.dtype) for key, spec in specs.items()}
    outputs = function(**empty)
    for key, value in outputs.items():
      assert value.shape[0] == 0, (name, key, value.shape)
    calls += 1
    if specs and all(spec.dtype.is_integer and spec.shape.rank == 2 for spec in specs.values()):
      rows = {key: tf.zeros([3, 0], spec.dtype) for key, spec in specs.items()}
      outputs = function(**rows)
      for key, value in outputs.items():
        assert value.shape[0] == 3, (name, key, value.shape)
        assert 0 in value.shape[1:] or key == "pooled_output", (name, key, value.shape)
      if "pooled_output" in outputs:
        np.testing.assert_array_equal(outputs["pooled_output"].numpy(), 0.0)
      calls += 1
  return calls


def write_lock(directory, pid, host=None, heartbeat=None):
  """A run-directory lock file (io.directory_lock's) naming pid on host (default: this one),
  with a heartbeat (seconds since the epoch) when given."""
  import json  # pylint: disable=g-import-not-at-top
  import socket  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  from bert_tf.io import LOCK_NAME  # pylint: disable=g-import-not-at-top
  record = dict(program="run_pretraining", pid=pid, host=host or socket.gethostname(),
                started="2026-01-01 00:00:00")
  if heartbeat is not None:
    record["heartbeat"] = heartbeat
  with open(os.path.join(directory, LOCK_NAME), "w") as f:
    json.dump(record, f)


# === Quiet logs ===
# What a command's stderr must not show on a normal run (issue 30): TensorFlow's start-up notices
# and the routine lines of training, prediction and export, as TensorFlow 2.20 prints them.
NOISE_MARKERS = (
    "cudart_stub.cc", "Could not find cuda drivers", "failed call to cuInit",
    "oneDNN custom operations are on", "cpu_feature_guard.cc",
    "To enable the following instructions", "Local rendezvous is aborting with status: "
    "OUT_OF_RANGE", "XLA service", "StreamExecutor device", "MLIR crash reproducer",
    "GeneratorDatasetOp", "oneDNN supports DT_INT64", "absl::InitializeLog",
    "Compiled cluster using XLA", "TFRecordDataset `buffer_size`", "{{node ",
    "with unsupported characters which will be renamed", "Sharding callback duration",
    "Assets written to", "Writing fingerprint to")


def noise_lines(stderr: str):
  """The lines of stderr that show one of NOISE_MARKERS."""
  return [line for line in stderr.splitlines()
          if any(marker in line for marker in NOISE_MARKERS)]


def pretraining_metrics(outputs, features):
  """Per-batch eval metrics named as in the original's eval_results.txt (plus the losses), from
  the loss primitives: a reference for the loop's summed eval metrics. Averaging per-batch
  values weights batches equally (the original's tf.metrics.mean of the losses);
  masked_lm_accuracy is weighted by masked_lm_weights across batches, hence
  masked_lm_weight_sum."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.training import losses  # pylint: disable=g-import-not-at-top
  result = losses.pretraining_losses(outputs, features)
  result["masked_lm_accuracy"] = losses.masked_lm_accuracy(
      outputs["masked_lm_logits"], features["masked_lm_ids"], features["masked_lm_weights"])
  result["next_sentence_accuracy"] = losses.next_sentence_accuracy(
      outputs["next_sentence_logits"], features["next_sentence_labels"])
  result["masked_lm_weight_sum"] = tf.reduce_sum(
      tf.cast(features["masked_lm_weights"], tf.float32))
  return result


# === Localhost workers of run_pretraining (TF_CONFIG) ===
# The tiny command that the preemption and lost-worker tests run, alone or as two workers.


def write_pretraining_inputs(directory: str) -> str:
  """make_records' train.tfrecord and tiny_config's bert_config.json in directory."""
  make_records(os.path.join(directory, "train.tfrecord"))
  tiny_config().to_json_file(os.path.join(directory, "bert_config.json"))
  return directory


def pretraining_command(workdir: str, output_dir: str, *extra: str):
  """`python -m bert_tf.run_pretraining` on write_pretraining_inputs(workdir)'s files."""
  import sys  # pylint: disable=g-import-not-at-top
  return [sys.executable, "-m", "bert_tf.run_pretraining",
          f"--bert_config_file={workdir}/bert_config.json",
          f"--input_file={workdir}/train.tfrecord", f"--output_dir={output_dir}",
          "--max_seq_length=16", "--max_predictions_per_seq=3", "--train_batch_size=8",
          "--learning_rate=1e-3", "--num_warmup_steps=0", "--seed=7", "--deterministic_ops",
          "--do_train", "--noexport_at_end", *extra]


def tiny_classifier_command(directory, output_dir, *flags):
  """`python -m bert_tf.run_classifier` on the classifier source fixture (tests/data/classifier/
  source: 360 train lines, 3 labels) with a tiny config written to `directory`, sequences of
  32, batch 16; `flags` add to it (--do_train, epochs, ...)."""
  import sys  # pylint: disable=g-import-not-at-top
  config = os.path.join(str(directory), "bert_config.json")
  with open(config, "w") as f:
    f.write('{"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2, '
            '"num_attention_heads": 2, "intermediate_size": 37, "max_position_embeddings": 64}')
  return [sys.executable, "-m", "bert_tf.run_classifier", "--task_name=generic",
          f"--data_dir={os.path.join(TEST_DATA, 'classifier', 'source')}",
          f"--vocab_file={os.path.join(TEST_DATA, 'vocab_uncased.txt')}",
          f"--bert_config_file={config}", f"--output_dir={output_dir}",
          "--text_a_column=sentence", "--label_column=label", "--max_seq_length=32",
          "--train_batch_size=16", *flags]


def start_workers(command, ports, logs, **env):
  """One process of `command` per port, as the workers of a localhost TF_CONFIG cluster, each
  writing stdout and stderr to its file of `logs`; env is added to their environment."""
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
  workers = []
  for index, log in enumerate(logs):
    tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
    with open(log, "w") as f:
      workers.append(subprocess.Popen(
          command, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT,
          env=subprocess_env(TF_CONFIG=tf_config, **env)))
  return workers


def wait_all(workers, timeout=240):
  """Waits for every process (then kills those still running); returns their exit codes."""
  try:
    for worker in workers:
      worker.wait(timeout=timeout)
  finally:
    for worker in workers:
      if worker.poll() is None:
        worker.kill()
        worker.wait()
  return [worker.returncode for worker in workers]


def read_text(path) -> str:
  with open(path) as f:
    return f.read()


def wait_for_line(path, line_has: str, process, timeout: float = 240) -> None:
  """Waits until the file `path` (a process's log) holds `line_has`; fails when the process
  ends first or after timeout seconds."""
  import time  # pylint: disable=g-import-not-at-top
  deadline = time.time() + timeout
  while line_has not in read_text(path):
    assert time.time() < deadline and process.poll() is None, read_text(path)[-3000:]
    time.sleep(0.05)
