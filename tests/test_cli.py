"""The command-line convention: every tool imports into one process, --help, exit codes,
settings built from same-named flags."""

import dataclasses
import errno
import importlib
import os
import subprocess
import sys

from absl import flags
import pytest
import tensorflow as tf

from bert_tf import cli
from bert_tf.training import errors
from tests import helpers

PACKAGE_TOOLS = ("run_pretraining", "run_classifier", "run_squad", "run_ner", "extract_features",
                 "export", "convert_checkpoint")
SCRIPTS = ("create_pretraining_data", "build_vocab", "tokenize_text", "inspect_records")


def all_tools():
  """Every CLI module, imported into this one process."""
  tools = {name: importlib.import_module(f"bert_tf.{name}") for name in PACKAGE_TOOLS}
  tools.update({name: helpers.load_script(name) for name in SCRIPTS})
  return tools


def test_every_tool_imports_into_one_process_without_defining_flags():
  before = set(flags.FLAGS)
  tools = all_tools()
  assert set(flags.FLAGS) == before  # importing defines nothing: flags come from define_flags
  for name, module in tools.items():
    assert callable(module.define_flags) and callable(module.main), name


@pytest.mark.parametrize("name", PACKAGE_TOOLS + SCRIPTS)
def test_help_in_process_lists_the_flags_and_exits_0(name, capsys):
  module = all_tools()[name]
  assert helpers.run_cli_in_process(module, [name, "--help"]) == 0
  out = capsys.readouterr().out
  flag_values = flags.FlagValues()
  module.define_flags(flag_values)
  for flag in flag_values:
    assert f"--{flag}" in out or f"--[no]{flag}" in out, (name, flag)


def test_shared_flags_are_defined_once_with_the_tools_defaults():
  flag_values = flags.FlagValues()
  all_tools()["run_pretraining"].define_flags(flag_values)
  for name in ("bert_config_file", "vocab_file", "do_lower_case", "init_checkpoint",
               "max_seq_length", "train_batch_size", "eval_batch_size", "learning_rate",
               "use_tpu", "tpu_name", "strategy", "mixed_precision", "jit_compile", "seed"):
    assert flag_values.find_module_defining_flag(name) == "bert_tf.cli", name
  # The original run_pretraining.py's defaults.
  assert flag_values["max_seq_length"].default == 128
  assert flag_values["learning_rate"].default == 5e-5
  assert flag_values["do_lower_case"].default is None  # checked against the data when given


def test_settings_from_same_named_flags():
  @dataclasses.dataclass(frozen=True)
  class Settings:
    learning_rate: float
    max_seq_length: int = 7
    not_a_flag: str = "kept"

  flag_values = flags.FlagValues()
  cli.define_batch_flags(flag_values, learning_rate=1e-4)
  flag_values(["prog", "--learning_rate=3e-5"])
  assert cli.settings_from_flags(Settings, flag_values) == Settings(3e-5, 7, "kept")
  assert cli.settings_from_flags(Settings, flag_values, max_seq_length=9).max_seq_length == 9


def _tool(exit_code_of):
  class Tool:
    FLAGS = None

    @staticmethod
    def define_flags(flag_values):
      flags.DEFINE_string("input_file", None, "in", flag_values=flag_values)
      flags.mark_flag_as_required("input_file", flag_values=flag_values)

    @staticmethod
    def main(argv):
      return exit_code_of(argv)
  return Tool


def test_exit_codes(capsys):
  def fail(_):
    raise FileNotFoundError("--input_file=x.txt: no such file\nsecond line")
  assert helpers.run_cli_in_process(_tool(lambda _: None), ["t", "--input_file=a"]) == 0
  assert helpers.run_cli_in_process(_tool(lambda _: 3), ["t", "--input_file=a"]) == 3
  assert helpers.run_cli_in_process(_tool(fail), ["t", "--input_file=a"]) == 1
  err = capsys.readouterr().err
  assert err == "t: error: --input_file=x.txt: no such file second line\n"
  assert helpers.run_cli_in_process(_tool(lambda _: None), ["t"]) == 2  # required flag
  assert "usage error" in capsys.readouterr().err
  assert helpers.run_cli_in_process(_tool(lambda _: None), ["t", "--input_file=a", "--x=1"]) == 2

  def usage(_):
    raise cli.UsageError("--a and --b contradict each other")
  assert helpers.run_cli_in_process(_tool(usage), ["t", "--input_file=a"]) == 2
  assert "--a and --b contradict" in capsys.readouterr().err

  def terminated(_):
    raise errors.RunTerminated("stopped by SIGTERM")
  assert helpers.run_cli_in_process(_tool(terminated), ["t", "--input_file=a"]) == 143
  assert capsys.readouterr().err.startswith("t: stopped by SIGTERM outside the training steps")

  def bug(_):
    raise ZeroDivisionError("a bug keeps its traceback")
  with pytest.raises(ZeroDivisionError):
    helpers.run_cli_in_process(_tool(bug), ["t", "--input_file=a"])


def _paths_tool(failure):
  class Tool:
    FLAGS = None

    @staticmethod
    def define_flags(flag_values):
      for name in ("input_file", "output_dir", "vocab_file"):
        flags.DEFINE_string(name, None, name, flag_values=flag_values)

    @staticmethod
    def main(argv):
      del argv
      raise failure
  return Tool


@pytest.mark.parametrize("failure, message", [
    # A read-only location fails on the temporary name; the flag's own value is named.
    (OSError(errno.EROFS, "Read-only file system", "out/run/ckpt.incomplete-7"),
     "--output_dir=out/run: Read-only file system (out/run/ckpt.incomplete-7)"),
    (PermissionError(errno.EACCES, "Permission denied", "out/run"),
     "--output_dir=out/run: Permission denied"),
    # A folder on the way to the output is a file: the one flag below it is named.
    (NotADirectoryError(errno.ENOTDIR, "a file, not a folder", "voc"),
     "--vocab_file=voc/vocab.txt: a file, not a folder (voc)"),
    # TensorFlow's own messages: the path inside the text; the op noise goes.
    (tf.errors.ResourceExhaustedError(
        None, None, "{{function_node __wrapped__SaveV2_dtypes_9_device_/job:localhost/replica:0"
        "/task:0/device:CPU:0}} out/run/ckpt-1_temp/part-0; No space left on device "
        "[Op:SaveV2]"),
     "--output_dir=out/run: out/run/ckpt-1_temp/part-0; No space left on device"),
    # Messages that already name a flag, and paths no flag names, are kept as they are.
    (FileNotFoundError("--vocab_file=voc/vocab.txt: not found"),
     "--vocab_file=voc/vocab.txt: not found"),
    (OSError(errno.ENOSPC, "No space left on device", "/elsewhere/x"),
     "/elsewhere/x: No space left on device"),
    # Two flags with the path as their value: both are named, not the first one alone.
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "in/a.txt"),
     "--input_file / --vocab_file=in/a.txt: No such file or directory"),
])
def test_os_and_tensorflow_failures_name_the_flag_of_their_path(failure, message, capsys):
  argv = ["t", "--input_file=in/a.txt,in/b.txt", "--output_dir=out/run",
          "--vocab_file=voc/vocab.txt"]
  if "--vocab_file=in/a.txt" in message:
    argv[-1] = "--vocab_file=in/a.txt"
  assert helpers.run_cli_in_process(_paths_tool(failure), argv) == 1
  assert capsys.readouterr().err == f"t: error: {message}\n"


def test_a_full_disk_names_the_output_not_its_temporary(tmp_path):
  """ENOSPC from write() or close() names no file; atomic_write says which output failed."""
  from bert_tf import io  # pylint: disable=g-import-not-at-top
  target = str(tmp_path / "vocab.txt")
  with pytest.raises(OSError) as raised:
    with io.atomic_write(target) as f:
      f.write("x")
      raise OSError(errno.ENOSPC, "No space left on device")
  assert (raised.value.errno, raised.value.filename) == (errno.ENOSPC, target)
  assert os.listdir(tmp_path) == []  # the temporary is gone


def test_build_vocab_checks_its_output_before_learning(tmp_path, capsys):
  """The write used to fail only after the whole corpus was learned (probe item 15)."""
  build_vocab = helpers.load_script("build_vocab")
  (tmp_path / "blocker").write_text("a file where a folder should be\n")
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("some words to learn from\n")
  calls = []
  saved = build_vocab.vocab_lib.count_words
  build_vocab.vocab_lib.count_words = lambda *a, **k: calls.append(a) or saved(*a, **k)
  try:
    code = helpers.run_cli_in_process(build_vocab, [
        "build_vocab.py", f"--input_file={corpus}",
        f"--vocab_file={tmp_path / 'blocker' / 'vocab.txt'}", "--vocab_size=200"])
    err = capsys.readouterr().err
    # A folder as the vocab file, and a limit that leaves nothing to learn from: refused
    # before learning too, naming the flag.
    (tmp_path / "folder").mkdir()
    folder = helpers.run_cli_in_process(build_vocab, [
        "build_vocab.py", f"--input_file={corpus}", f"--vocab_file={tmp_path / 'folder'}",
        "--overwrite"])
    folder_err = capsys.readouterr().err
    zero = helpers.run_cli_in_process(build_vocab, [
        "build_vocab.py", f"--input_file={corpus}", f"--vocab_file={tmp_path / 'v.txt'}",
        "--max_input_words=0"])
    zero_err = capsys.readouterr().err
  finally:
    build_vocab.vocab_lib.count_words = saved
  assert code == 1 and not calls
  assert err == (
      f"build_vocab.py: error: --vocab_file={tmp_path / 'blocker' / 'vocab.txt'}: a file, not a "
      f"folder ({tmp_path / 'blocker'})\n")
  assert folder == 1 and folder_err == (
      f"build_vocab.py: error: --vocab_file={tmp_path / 'folder'}: a folder, not a file\n")
  assert zero == 1 and zero_err == (
      "build_vocab.py: error: --max_input_words must be >= 1, got 0\n")


@pytest.mark.slow
@pytest.mark.parametrize("command", [["-m", f"bert_tf.{n}"] for n in PACKAGE_TOOLS]
                         + [[f"{helpers.REPO_ROOT}/data_prep/{n}.py"] for n in SCRIPTS])
def test_help_as_a_command(command, tmp_path):
  result = subprocess.run([sys.executable] + command + ["--help"], capture_output=True,
                          text=True, timeout=300, cwd=str(tmp_path), env=helpers.subprocess_env())
  assert result.returncode == 0, result.stderr
  assert "--" in result.stdout
  bad = subprocess.run([sys.executable] + command + ["--no_such_flag"], capture_output=True,
                       text=True, timeout=300, cwd=str(tmp_path), env=helpers.subprocess_env())
  assert bad.returncode == 2 and "no_such_flag" in bad.stderr, bad.stderr


def test_tool_constants_repeat_the_library_values():
  # The commands define flags without importing TensorFlow, so they repeat two library values.
  from bert_tf import convert_checkpoint, export  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import tf_serving  # pylint: disable=g-import-not-at-top
  assert convert_checkpoint.FORMATS == checkpoints.FORMATS
  assert (export.DEFAULT_SEQ_LENGTH, export.DEFAULT_TOP_K) == (tf_serving.DEFAULT_SEQ_LENGTH,
                                                               tf_serving.DEFAULT_TOP_K)


@pytest.mark.parametrize("command", ["run_classifier", "run_ner", "run_squad", "export"])
def test_serving_flags_reach_the_export(command):
  """--serving_precision and --pack_requests: every exporting command defines them, and the
  fine-tuning commands' exporter builds its modules under those options."""
  from bert_tf.model import exporting  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import modules  # pylint: disable=g-import-not-at-top
  module = importlib.import_module(f"bert_tf.{command}")
  values = flags.FlagValues()
  module.define_flags(values)
  values.mark_as_parsed()  # the commands' required flags are not this test's business
  assert (values.serving_precision, values.pack_requests) == ("float32", True)
  values.serving_precision, values.pack_requests = "bfloat16", False
  seen = []
  exporter = exporting.Exporter("m", lambda *args: seen.append(
      (args, modules.current_inference_options())) or "path")
  assert cli.serving_exporter(exporter, values).export(1, 2) == "path"
  assert seen == [((1, 2), modules.InferenceOptions("bfloat16", False))]
  assert modules.current_inference_options() == modules.InferenceOptions()  # restored
  with pytest.raises(flags.IllegalFlagValueError):
    values["serving_precision"].parse("float16")


def test_an_id_outside_the_embedding_tables_is_named_in_one_line():
  """TensorFlow's own error (a multi-line trace of the gather) becomes one line naming the
  config's table size and --bert_config_file."""
  from bert_tf import cli  # pylint: disable=g-import-not-at-top
  from bert_tf.model import encoder as encoder_lib  # pylint: disable=g-import-not-at-top
  encoder = encoder_lib.build_encoder(helpers.tiny_config(vocab_size=50,
                                                          max_position_embeddings=16))
  run = tf.function(lambda ids, types: encoder(
      dict(input_word_ids=ids, input_mask=tf.ones_like(ids), input_type_ids=types)))
  lines = []
  for ids, types in (([[1, 2, 70]], [[0, 0, 0]]), ([[1, 2, 3]], [[0, 0, 5]])):
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
      run(tf.constant(ids), tf.constant(types))
    lines.append(cli.describe_failure(raised.value))
  assert lines == [
      "the input holds token id 70, outside [0, 50) of the config's vocab_size "
      "(--bert_config_file): the data was made with a larger vocab than the model's; make it "
      "with the model's vocab",
      "the input holds segment id or position 5, outside [0, 2) of the config's "
      "type_vocab_size or max_position_embeddings (--bert_config_file)"]
