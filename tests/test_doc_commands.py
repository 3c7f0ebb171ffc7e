"""Every command the user pages show parses: each flag of each `python -m bert_tf.NAME` and
`python data_prep/NAME.py` line in a code block of README.md or docs/*.md is a flag of that
command (its absl definitions, read in this process: no subprocess per command), and a value
naming a file of the clone (`./setup.py`) names one that exists. Every Python example names
bert_tf attributes that exist and keyword arguments its functions take."""

import ast
import functools
import importlib
import importlib.util
import inspect
import os
import re
import shlex
import textwrap

from absl import flags
import pytest

from tests import helpers

REPO_ROOT = helpers.REPO_ROOT

# A command inside a code block: the interpreter (any path to it), then the module or script.
COMMAND = re.compile(r"(?:^|[\s;&|(])(?:\S*/)?python3?\s+"
                     r"(?:-m\s+(bert_tf(?:\.\w+)+)|(data_prep/\w+\.py))")


def _pages():
  docs = sorted(os.path.join("docs", name) for name in os.listdir(os.path.join(REPO_ROOT, "docs"))
                if name.endswith(".md"))
  return ["README.md", *docs]


def doc_commands(markdown):
  """(command, [argument, ...]) of every command line in markdown's code blocks, with `\\`
  continuations joined; `...` placeholders and what follows a `#` dropped."""
  found = []
  for body in re.findall(r"```[a-z]*\n(.*?)```", markdown, flags=re.S):
    body = body.replace("\\\n", " ")
    for line in body.splitlines():
      match = COMMAND.search(line)
      if not match:
        continue
      rest = line[match.end():]
      words = shlex.split(rest, comments=True)
      # A command ends at a shell separator.
      for end, word in enumerate(words):
        if word in (";", "&&", "||", "|", ">", "<"):
          words = words[:end]
          break
      found.append((match.group(1) or match.group(2),
                    [w for w in words if not w.startswith("...") and w != "..."]))
  return found


def _load(path):
  spec = importlib.util.spec_from_file_location(
      "doc_command_" + re.sub(r"\W", "_", path), os.path.join(REPO_ROOT, path))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@functools.lru_cache(maxsize=None)
def command_flags(command):
  """{flag name: is boolean} of a command: its define_flags() on fresh FlagValues, or for the
  main job (argparse) its parser's options; absl's own flags (--verbosity, --flagfile, ...)
  count too, since every absl command takes them."""
  path = command.replace(".", "/") + ".py" if command.startswith("bert_tf.") else command
  module = _load(path)
  if hasattr(module, "build_parser"):
    names = {}
    for action in module.build_parser()._actions:  # pylint: disable=protected-access
      for option in action.option_strings:
        if option.startswith("--"):
          names[option[2:]] = action.nargs == 0
    return names
  flag_values = flags.FlagValues()
  module.define_flags(flag_values)
  from absl import logging  # pylint: disable=g-import-not-at-top,unused-import
  names = {name: isinstance(flag, flags.BooleanFlag)
           for name, flag in flag_values._flags().items()}  # pylint: disable=protected-access
  for name, flag in flags.FLAGS._flags().items():  # pylint: disable=protected-access
    if (flags.FLAGS.find_module_defining_flag(name) or "").startswith("absl."):
      names.setdefault(name, isinstance(flag, flags.BooleanFlag))
  return names


def command_problems(command, args):
  """What is wrong with one documented command line: unknown flags, a missing file."""
  known = command_flags(command)
  problems, beam_args = [], []
  runner = any(a == "--runner" or a.startswith("--runner=") for a in args)
  for arg in args:
    if not arg.startswith("--"):
      continue
    name, _, value = arg[2:].partition("=")
    ours = name in known or (name.startswith("no") and known.get(name[2:], False))
    if not ours:
      if runner and command == "data_prep/create_pretraining_data.py":
        beam_args.append(arg)  # Beam's PipelineOptions: checked below.
      else:
        problems.append(f"{command}: --{name} is not a flag of the command")
    if value.startswith("./") and not os.path.exists(os.path.join(REPO_ROOT, value)):
      problems.append(f"{command}: --{name}={value}: no such file in the repository")
  if beam_args:
    pytest.importorskip("apache_beam", reason="the [beam] extra checks the Beam flags")
    from bert_tf.data import beam_pipeline  # pylint: disable=g-import-not-at-top
    from bert_tf.data import pretraining_data  # pylint: disable=g-import-not-at-top
    try:
      beam_pipeline.pipeline_options(beam_args)
    except pretraining_data.UsageError as e:
      problems.append(f"{command}: {e}")
  return problems


def test_doc_commands_finds_commands_and_their_flags():
  markdown = ("```\npython -m bert_tf.run_classifier --task_name=generic \\\n"
              "    --do_train ... --output_dir=/tmp/x  # a comment --not_a_flag\n"
              ".venv/bin/python data_prep/build_vocab.py --input_file=a.txt && ls\n```\n"
              "`python -m bert_tf.export --inline` is not a block\n")
  assert doc_commands(markdown) == [
      ("bert_tf.run_classifier", ["--task_name=generic", "--do_train", "--output_dir=/tmp/x"]),
      ("data_prep/build_vocab.py", ["--input_file=a.txt"]),
  ]


def test_command_problems_finds_a_wrong_flag_and_a_missing_file():
  assert command_problems("bert_tf.run_classifier", ["--do_train", "--nodo_eval",
                                                     "--verbosity=1"]) == []
  assert command_problems("bert_tf.run_classifier", ["--do_trian"]) == [
      "bert_tf.run_classifier: --do_trian is not a flag of the command"]
  # --no<name> only for a boolean.
  assert command_problems("bert_tf.run_classifier", ["--nolearning_rate"]) != []
  assert command_problems("data_prep/run_sample.py", ["--output_dir=x", "--steps=3"]) == [
      "data_prep/run_sample.py: --steps is not a flag of the command"]
  assert command_problems("bert_tf.export", ["--vocab_file=./no_such_vocab.txt"]) == [
      "bert_tf.export: --vocab_file=./no_such_vocab.txt: no such file in the repository"]


def test_command_problems_checks_beam_flags_against_beam():
  pytest.importorskip("apache_beam", reason="the [beam] extra checks the Beam flags")
  command = "data_prep/create_pretraining_data.py"
  assert command_problems(command, ["--runner=DirectRunner", "--direct_num_workers=2"]) == []
  problems = command_problems(command, ["--runner=DirectRunner", "--direct_num_wokers=2"])
  assert len(problems) == 1 and "--direct_num_wokers" in problems[0]


@pytest.mark.parametrize("page", _pages())
def test_every_documented_command_parses(page):
  with open(os.path.join(REPO_ROOT, page), encoding="utf-8") as f:
    commands = doc_commands(f.read())
  problems = [f"{page}: {problem}" for command, args in commands
              for problem in command_problems(command, args)]
  assert problems == []


def test_the_pages_show_every_command():
  """The check above reads real commands: every command of the README's table appears in a
  code block, with its flags."""
  shown = {}
  for page in _pages():
    with open(os.path.join(REPO_ROOT, page), encoding="utf-8") as f:
      for command, args in doc_commands(f.read()):
        shown.setdefault(command, 0)
        shown[command] += sum(a.startswith("--") for a in args)
  expected = {"bert_tf.run_pretraining", "bert_tf.run_classifier", "bert_tf.run_squad",
              "bert_tf.run_ner", "bert_tf.extract_features", "bert_tf.convert_checkpoint",
              "bert_tf.export", "data_prep/build_vocab.py", "data_prep/tokenize_text.py",
              "data_prep/create_pretraining_data.py", "data_prep/run_sample.py"}
  assert expected <= set(shown)
  assert sum(shown.values()) > 200


# === The Python examples ===


def _resolve(node, names):
  """The object an expression of Names and Attributes names, or None (not ours to check)."""
  if isinstance(node, ast.Name):
    return names.get(node.id)
  if isinstance(node, ast.Attribute):
    owner = _resolve(node.value, names)
    if owner is None:
      return None
    if not hasattr(owner, node.attr):
      raise AttributeError(f"{ast.unparse(node)}: {owner.__name__} has no {node.attr!r}")
    return getattr(owner, node.attr)
  return None


def python_problems(code):
  """What is wrong in a Python example that uses bert_tf: a name it imports or an attribute it
  reads that does not exist, a keyword argument the called function does not take."""
  try:
    tree = ast.parse(code)
  except SyntaxError as e:
    return [f"syntax error: {e}"]
  names, problems = {}, []
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bert_tf"):
      module = importlib.import_module(node.module)
      for alias in node.names:
        try:
          names[alias.asname or alias.name] = (
              getattr(module, alias.name) if hasattr(module, alias.name)
              else importlib.import_module(f"{node.module}.{alias.name}"))
        except ImportError:
          problems.append(f"from {node.module} import {alias.name}: no such name")
    elif isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.startswith("bert_tf"):
          module = importlib.import_module(alias.name)
          names[alias.asname or alias.name.split(".")[0]] = (
              module if alias.asname else importlib.import_module("bert_tf"))
  for node in ast.walk(tree):
    try:
      if isinstance(node, ast.Attribute):
        _resolve(node, names)
      elif isinstance(node, ast.Call):
        function = _resolve(node.func, names)
        if callable(function):
          parameters = inspect.signature(function).parameters
          takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
          problems += [f"{ast.unparse(node.func)}() takes no keyword {k.arg!r}"
                       for k in node.keywords if k.arg and not takes_any
                       and k.arg not in parameters]
    except (AttributeError, ValueError) as e:
      problems.append(str(e))
  return sorted(set(problems))


def test_python_problems_finds_a_wrong_name_and_keyword():
  good = ("from bert_tf.training import pretraining\n"
          "pretraining.run_pretraining(None, None, exporter=None)\n")
  assert python_problems(good) == []
  bad = ("from bert_tf.serving import saved_model\nfrom bert_tf.training import pretraining\n"
         "pretraining.run_pretraining(None, None, export_fn=saved_model.export_step)\n")
  assert python_problems(bad) == [
      "pretraining.run_pretraining() takes no keyword 'export_fn'",
      "saved_model.export_step: bert_tf.serving.saved_model has no 'export_step'"]


@pytest.mark.parametrize("page", _pages())
def test_every_python_example_names_what_exists(page):
  with open(os.path.join(REPO_ROOT, page), encoding="utf-8") as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
  problems = [f"{page}: {problem}" for block in blocks
              for problem in python_problems(textwrap.dedent(block))]
  assert problems == []
