"""Quiet logs (bert_tf/logs.py): TensorFlow's routine lines hidden, real errors and our lines shown.

The lines are as TensorFlow 2.20 printed them on this project's machine (x86-64 with AVX2 and no
AVX-512, no NVIDIA driver), captured from run_classifier, run_pretraining, run_squad, run_ner and
extract_features: KNOWN still prints at TF_CPP_MIN_LOG_LEVEL=1 (the commands' default) and is the
filter's business; LEVEL_HIDDEN are C++ INFO lines that the log level keeps TensorFlow from
printing at all.
"""

import os
import subprocess
import sys

import pytest

from bert_tf import logs
from tests import helpers

KNOWN = [
    "2026-11-25 06:03:24.479434: E external/local_xla/xla/stream_executor/cuda/cuda_platform.cc"
    ":51] failed call to cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "2026-11-25 06:03:32.312479: W tensorflow/core/framework/dataset.cc:993] Input of "
    "GeneratorDatasetOp::Dataset will not be optimized because the dataset does not implement "
    "the AsGraphDefInternal() method needed to apply optimizations.",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795586619.961743    5860 device_compiler.h:196] Compiled cluster using XLA!  "
    "This line is logged at most once for the lifetime of the process.",
    "2026-11-25 06:07:37.054149: E tensorflow/core/util/util.cc:131] oneDNN supports DT_INT64 "
    "only on platforms with AVX-512. Falling back to the default Eigen-based implementation if "
    "present.",
]
LEVEL_HIDDEN = [
    "2026-11-25 06:03:22.066037: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:31] Could not "
    "find cuda drivers on your machine, GPU will not be used.",
    "2026-11-25 06:03:22.066358: I tensorflow/core/util/port.cc:153] oneDNN custom operations "
    "are on. You may see slightly different numerical results due to floating-point round-off "
    "errors from different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
    "2026-11-25 06:03:22.154245: I tensorflow/core/platform/cpu_feature_guard.cc:210] This "
    "TensorFlow binary is optimized to use available CPU instructions in performance-critical "
    "operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    "with the appropriate compiler flags.",
    "2026-11-25 06:03:39.768691: I tensorflow/core/kernels/data/tf_record_dataset_op.cc:390] "
    "TFRecordDataset `buffer_size` is unspecified, default to 262144",
    "2026-11-25 06:03:39.779739: I external/local_xla/xla/service/service.cc:163] XLA service "
    "0x7fca98089610 initialized for platform Host (this does not guarantee that XLA will be "
    "used). Devices:",
    "2026-11-25 06:03:39.779771: I external/local_xla/xla/service/service.cc:171]   "
    "StreamExecutor device (0): Host, Default Version",
    "2026-11-25 06:03:40.031821: I tensorflow/compiler/mlir/tensorflow/utils/dump_mlir_util.cc:"
    "269] disabling MLIR crash reproducer, set env var `MLIR_CRASH_REPRODUCER_DIRECTORY` to "
    "enable.",
    "2026-11-25 06:03:46.746585: I tensorflow/core/framework/local_rendezvous.cc:407] Local "
    "rendezvous is aborting with status: OUT_OF_RANGE: End of sequence",
    "\t [[{{node MultiDeviceIteratorGetNextFromShard}}]]",
]
# Lines that must show: ours (a real warning among them), other errors, a traceback.
SHOWN = [
    "I1125 06:28:39.030601 140166047746944 classifier_run.py:287]   Num examples = 360",
    "W1125 06:09:30.113075 139974907558784 squad_run.py:256] 25 training questions are longer "
    "than --max_query_length and were cut to its first WordPieces",
    "I1125 06:29:02.390096 140166047746944 loop.py:584] step 22/22 loss = 1.1020 accuracy = "
    "0.2188 learning_rate = 0 examples/s = 455.8 ETA 0:00:00",
    "run_classifier: error: --init_checkpoint=x: not found",
    "2026-11-25 06:03:24.479434: E tensorflow/core/kernels/some_op.cc:12] Something failed",
    "2026-11-25 06:03:24.479434: W tensorflow/core/framework/op_kernel.cc:1857] OP_REQUIRES "
    "failed at reshape_op.h:65 : INVALID_ARGUMENT: Input to reshape is a tensor with 3 values",
    "F0000 00:00:1795586619.961743    5860 device_compiler.h:196] Check failed: x == y",
    "Traceback (most recent call last):",
    '  File "/work/bert_tf/cli.py", line 350, in run',
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: Graph execution error:",
    "",
]
# Lines like known ones that must show all the same.
LOOKALIKES = [
    # Another message from a file that has a known line, or the known message at another level.
    "2026-11-25 06:03:24.479434: E tensorflow/core/util/util.cc:131] oneDNN supports DT_INT64 "
    "only on platforms with AVX-512. And something else.",
    "2026-11-25 06:03:24.479434: E tensorflow/core/framework/dataset.cc:993] Input of "
    "GeneratorDatasetOp::Dataset will not be optimized because the dataset does not implement "
    "the AsGraphDefInternal() method needed to apply optimizations.",
    # A rendezvous that ends with an error, not at the end of a dataset, with its node line.
    "2026-11-25 06:14:01.932837: I tensorflow/core/framework/local_rendezvous.cc:407] Local "
    "rendezvous is aborting with status: INVALID_ARGUMENT: indices[0,1] = 2 is not in [0, 2)",
    "\t [[{{function_node __inference__serve_2353}}{{node bert_encoder_1/embeddings_1/GatherV2}}]]",
    # A continuation line on its own.
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow "
    "with the appropriate compiler flags.",
]


def kept(lines, **kwargs):
  line_filter = logs.LineFilter(**kwargs)
  return [line for line in lines if line_filter.keep(line.encode())]


def test_the_known_lines_are_dropped_and_everything_else_kept():
  assert kept(KNOWN, nvidia_driver=False) == []
  assert kept(SHOWN + LOOKALIKES, nvidia_driver=False) == SHOWN + LOOKALIKES
  assert kept(KNOWN + SHOWN + KNOWN + LOOKALIKES + KNOWN, nvidia_driver=False) == \
      SHOWN + LOOKALIKES


def test_the_command_tests_look_for_every_known_line():
  # helpers.noise_lines is what the command tests look for: it finds all of KNOWN, none of SHOWN.
  assert len(helpers.noise_lines("\n".join(KNOWN))) == len(KNOWN)
  assert len(helpers.noise_lines("\n".join(LEVEL_HIDDEN))) == len(LEVEL_HIDDEN)
  assert helpers.noise_lines("\n".join(SHOWN)) == []


def test_a_failed_cuinit_shows_where_an_nvidia_driver_is_installed():
  cuinit = [line for line in KNOWN if "cuInit" in line]
  assert kept(cuinit, nvidia_driver=False) == []
  assert kept(cuinit, nvidia_driver=True) == cuinit


def test_info_lines_are_left_to_the_log_level():
  # TF_CPP_MIN_LOG_LEVEL=1 keeps TensorFlow from printing them; a user who sets it to 0 asked
  # for them, so the filter passes them (the command tests check that a run prints none).
  assert kept(LEVEL_HIDDEN) == LEVEL_HIDDEN


def _filtered(data: bytes) -> bytes:
  source_read, source_write = os.pipe()
  sink_read, sink_write = os.pipe()
  os.write(source_write, data)
  os.close(source_write)
  logs.filter_stream(source_read, sink_write, logs.LineFilter(nvidia_driver=False))
  os.close(source_read)
  os.close(sink_write)
  with os.fdopen(sink_read, "rb") as f:
    return f.read()


def test_the_stream_filter_keeps_bytes_order_and_a_last_partial_line():
  lines = KNOWN + SHOWN + KNOWN + LOOKALIKES
  data = ("\n".join(lines) + "\nno newline at the end").encode()
  assert _filtered(data) == ("\n".join(SHOWN + LOOKALIKES) + "\nno newline at the end").encode()
  # Not UTF-8, and carriage returns: passed as they are.
  assert _filtered(b"\xff\xfe odd bytes\r\nprogress 1\rprogress 2\n") == \
      b"\xff\xfe odd bytes\r\nprogress 1\rprogress 2\n"


def test_verbose_when_asked_by_environment_or_verbosity_flag(monkeypatch):
  from absl import flags  # pylint: disable=g-import-not-at-top
  monkeypatch.delenv(logs.VERBOSE_ENV, raising=False)
  assert not logs.verbose_requested()
  for value in ("1", "yes"):
    monkeypatch.setenv(logs.VERBOSE_ENV, value)
    assert logs.verbose_requested()
  for value in ("0", "", "false"):
    monkeypatch.setenv(logs.VERBOSE_ENV, value)
    assert not logs.verbose_requested()
  flag_values = flags.FlagValues()
  flags.DEFINE_integer("verbosity", -1, "absl's", flag_values=flag_values)
  flag_values(["tool"])
  assert not logs.verbose_requested(flag_values)  # absl raises the default to 0 (INFO)
  flag_values(["tool", "--verbosity=0"])
  assert not logs.verbose_requested(flag_values)
  flag_values(["tool", "--verbosity=1"])
  assert logs.verbose_requested(flag_values)


# === Commands in subprocesses ===

_COMMAND = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from absl import flags
from absl import logging
from bert_tf import cli

def define_flags(flag_values):
  flags.DEFINE_enum("end", "return", ["return", "raise", "abort", "partial"], "How main ends.",
                    flag_values=flag_values)

def main(argv):
  cli.apply_runtime_flags(flags.FLAGS)
  print(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "unset"), flush=True)
  with open(sys.argv[2], "rb") as f:
    os.write(2, f.read())
  sys.stderr.write("a Python line\n")
  logging.info("our own line")
  logging.debug("a debug line")
  end = flags.FLAGS.end
  if end == "raise":
    raise RuntimeError("a bug")
  if end == "abort":
    os.write(2, b"last words without a newline")
    os.abort()
  if end == "partial":
    os.write(2, b"no newline at exit")

if __name__ == "__main__":
  cli.run(main, define_flags, "probe", argv=[sys.argv[0]] + sys.argv[3:])
"""


@pytest.fixture(scope="module")
def command(tmp_path_factory):
  root = tmp_path_factory.mktemp("logs")
  (root / "command.py").write_text(_COMMAND)
  (root / "lines.txt").write_bytes(("\n".join(KNOWN + SHOWN) + "\n").encode())

  def run(*args, **env):
    return subprocess.run(
        [sys.executable, str(root / "command.py"), helpers.REPO_ROOT, str(root / "lines.txt"),
         *args], env=helpers.user_env(**env), capture_output=True, text=True, timeout=120,
        check=False)
  return run


def test_a_command_hides_the_known_lines_and_shows_the_rest(command):
  done = command()
  assert done.returncode == 0, done.stderr
  assert done.stdout == "1\n"  # TF_CPP_MIN_LOG_LEVEL, set for TensorFlow yet to be imported
  noise = helpers.noise_lines(done.stderr)
  if os.path.exists(logs.NVIDIA_DRIVER):
    # With an NVIDIA driver but no GPU, TensorFlow's failed cuInit is logged before any filter
    # of ours can act: those lines, and only those, may show.
    noise = [line for line in noise if "cuInit" not in line]
  assert noise == []
  assert "\n".join(SHOWN) + "\n" in done.stderr
  assert "a Python line\n" in done.stderr and "] our own line\n" in done.stderr
  assert "a debug line" not in done.stderr
  # A user's own TF_CPP_MIN_LOG_LEVEL is kept.
  assert command(TF_CPP_MIN_LOG_LEVEL="0").stdout == "0\n"


def test_a_command_shows_everything_when_asked(command):
  for done in (command(BERT_TF_VERBOSE="1"), command("--verbosity=1"), command("-v", "1")):
    assert done.returncode == 0, done.stderr
    assert done.stdout == "unset\n"
    assert len(helpers.noise_lines(done.stderr)) == len(KNOWN)
    assert "] our own line\n" in done.stderr
  assert "] a debug line\n" in done.stderr  # --verbosity=1 is absl's DEBUG level too


def test_a_crash_or_a_traceback_still_reaches_the_terminal(command):
  done = command("--end=raise")
  assert done.returncode == 1
  assert "Traceback (most recent call last):" in done.stderr
  assert done.stderr.rstrip().endswith("RuntimeError: a bug")
  assert helpers.noise_lines(done.stderr) == []
  done = command("--end=abort")  # a C++ abort: the lines written before it still arrive
  assert done.returncode == -6
  assert "] our own line\nlast words without a newline" in done.stderr
  assert "Fatal Python error: Aborted" in done.stderr  # absl's faulthandler, also through
  assert helpers.noise_lines(done.stderr) == []
  done = command("--end=partial")
  assert done.returncode == 0 and done.stderr.endswith("no newline at exit")


_TENSORFLOW = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from absl import flags
from bert_tf import cli

def main(argv):
  import tensorflow as tf
  # An int64 transpose in a graph, as raw-text graphs have: with oneDNN on a CPU without
  # AVX-512, TensorFlow logs that it keeps its own kernel (an E line).
  transpose = tf.function(lambda x: tf.transpose(x))
  transpose(tf.constant([[1, 2], [3, 4]], tf.int64))
  tf.print("printed by a TensorFlow kernel", output_stream=sys.stderr)
  tf.reshape(tf.range(3), [2])  # a real error

if __name__ == "__main__":
  cli.run(main, lambda flag_values: None, "probe", argv=sys.argv[:1] + sys.argv[2:])
"""


@pytest.mark.slow
def test_tensorflow_start_up_lines_hidden_its_output_and_errors_shown(tmp_path):
  script = tmp_path / "tensorflow_probe.py"
  script.write_text(_TENSORFLOW)

  def run(**env):
    return subprocess.run([sys.executable, str(script), helpers.REPO_ROOT],
                          env=helpers.user_env(**env), capture_output=True, text=True, timeout=300,
                          check=False)
  quiet = run()
  assert quiet.returncode == 1, quiet.stderr
  assert helpers.noise_lines(quiet.stderr) == []
  assert "printed by a TensorFlow kernel\n" in quiet.stderr
  assert "probe: error: Input to reshape is a tensor with 3 values, but the requested shape " \
         "has 2\n" in quiet.stderr
  loud = run(BERT_TF_VERBOSE="1", BERT_TF_TRACEBACK="1")
  assert loud.returncode == 1
  assert "printed by a TensorFlow kernel\n" in loud.stderr
  assert "InvalidArgumentError" in loud.stderr and "Traceback (most recent" in loud.stderr
  if os.uname().machine.lower() in ("x86_64", "amd64"):  # where bert_tf turns oneDNN on
    assert "oneDNN custom operations are on" in loud.stderr
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      if " avx512f" not in f.read():
        assert "oneDNN supports DT_INT64 only on platforms with AVX-512" in loud.stderr


# A real run_classifier (train, eval, predict, export) prints only its own lines: the resumed run
# of tests/training/test_preemption.py,
# test_sigterm_to_run_classifier_saves_exits_75_and_the_same_command_resumes, checks it.


# === The original's dumps ===


def _record(path, msg, args=()):
  import logging  # pylint: disable=g-import-not-at-top
  return logging.LogRecord("absl", logging.INFO, path, 1, msg, args, None)


def test_the_originals_dumps_are_one_line_each_unless_verbose():
  hide = logs._HideDumps()  # pylint: disable=protected-access
  header = _record("/x/bert_tf/training/loop.py", "**** Trainable Variables ****")
  assert hide.filter(header)
  assert header.getMessage() == ("(the trainable variables, as the original logs them: "
                                 "--verbosity=1 or BERT_TF_VERBOSE=1)")
  assert not hide.filter(_record("/x/bert_tf/training/loop.py", "  name = %s, shape = %s%s",
                                 ("layer_0/kernel", (4, 4), "")))
  # The next example's header is dropped: one line per kind of dump.
  first = _record("/x/bert_tf/tasks/classifier/data.py", "*** Example %d ***", (0,))
  assert hide.filter(first) and "first examples' tokens and ids" in first.getMessage()
  assert not hide.filter(_record("/x/bert_tf/tasks/classifier/data.py", "*** Example %d ***",
                                 (1,)))
  assert not hide.filter(_record("/x/bert_tf/tasks/classifier/data.py", "tokens: %s", ("a b",)))
  # Everything else passes: the same message from another file, progress lines, warnings.
  assert hide.filter(_record("/x/bert_tf/tasks/tagging/data.py", "tokens: %s", ("a b",)))
  assert hide.filter(_record("/x/bert_tf/training/loop.py", "step %d/%d loss = %.4f",
                             (1, 2, 0.5)))


def test_every_hidden_dump_line_is_logged_where_the_table_says():
  """The table names real log calls: a message moved or reworded would otherwise show again
  unnoticed."""
  sources = {}
  package = os.path.join(helpers.REPO_ROOT, "bert_tf")
  for root, _, names in os.walk(package):
    for name in names:
      if name.endswith(".py"):
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as f:
          sources[os.path.relpath(path, package).replace(os.sep, "/")] = f.read()
  for source, message in [*logs.DUMP_STARTS, *logs.DUMP_LINES]:
    assert f'logging.info("{message}"' in sources.get(source, ""), (source, message)
