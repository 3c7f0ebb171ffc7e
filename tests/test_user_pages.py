"""The user pages speak to users: no issue numbers, commit hashes or dated investigation notes.

The pages a user reads (README.md, CONTRIBUTING.md, docs/*.md, benchmarks/README.md) say what the
code does and what was measured, with a link to the results file; how the project got there (which
issue asked, which commit, on what day, on how loaded a machine) is history and goes in
HISTORY.md or benchmarks/HISTORY.md, which this test does not read.
"""

import os
import re

import pytest

from tests import helpers

REPO_ROOT = helpers.REPO_ROOT


def user_pages():
  docs = sorted(os.path.join("docs", name) for name in os.listdir(os.path.join(REPO_ROOT, "docs"))
                if name.endswith(".md"))
  return ["README.md", "CONTRIBUTING.md", *docs, os.path.join("benchmarks", "README.md")]


# A results file's name may carry the date of its run (benchmarks/results/NAME_2026-12-05.json):
# it names the file, it is not a note. Removed before the patterns are searched.
RESULTS_FILE = re.compile(r"[\w./-]*\d{4}-\d\d-\d\d[\w.-]*\.(?:json|png|svg|csv|jsonl)\b")

MONTHS = ("January|February|March|April|May|June|July|August|September|October|November|"
          "December")

# (what it is, pattern). Each is a passage about the project's process, not about the code.
PATTERNS = (
    # "issue 39", "issues 27 and 37", "Issue #40"; a public project's thread is written
    # owner/repo#N (google-research/bert#345) and stays.
    ("an issue number", re.compile(r"\bissues? #?\d+", re.I)),
    ("an issue number", re.compile(r"(?<![\w/.#&-])#\d+\b")),
    # 7-40 hex digits with a letter and a digit in them: a commit, not a number or a word.
    ("a commit hash",
     re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")),
    ("a date", re.compile(r"\b20\d\d-\d\d-\d\d\b")),
    ("a date", re.compile(rf"\b\d{{1,2}} (?:{MONTHS}) 20\d\d\b")),
    ("a date", re.compile(rf"\b(?:{MONTHS}) \d{{1,2}}(?:st|nd|rd|th)?,? 20\d\d\b")),
    ("a machine's load", re.compile(r"\bload (?:average|of \d)", re.I)),
    ("a run named by where it was quoted", re.compile(r"\bthe run quoted in\b", re.I)),
    ("a run read by a rule of its time",
     re.compile(r"\bby the (?:current )?rule of the time\b|\bread by the current rule\b", re.I)),
    ("a page's own history", re.compile(r"\bthis page was until\b|\bin this session\b", re.I)),
)


def process_passages(text):
  """(line number, what, the line) of every passage in text that a pattern finds."""
  found = []
  for number, line in enumerate(text.splitlines(), start=1):
    searched = RESULTS_FILE.sub("", line)
    for what, pattern in PATTERNS:
      if pattern.search(searched):
        found.append((number, what, line.strip()))
  return found


@pytest.mark.parametrize("text, what", [
    ("the run quoted in issue 39 gave 0.685", "an issue number"),
    ("The goals of Issue #40, met", "an issue number"),
    ("fixed in #74.", "an issue number"),
    ("from a clone of e450f97, pre-registered", "a commit hash"),
    ("(cc54da5: see below)", "a commit hash"),
    ("three runs (2026-11-27; runs 1 and 2 shared", "a date"),
    ("measured on 27 November 2026", "a date"),
    ("at a load average of 8 to 16", "a machine's load"),
    ("| the run quoted in the tracker | 0.244 |", "a run named by where it was quoted"),
    ("2 or 3 of 4, read by the current rule", "a run read by a rule of its time"),
])
def test_a_process_passage_is_found(text, what):
  assert [found[1] for found in process_passages(text)][:1] == [what]


@pytest.mark.parametrize("text", [
    "users report 90-91.7 (google-research/bert#345, google-research/bert#223)",
    "results: `benchmarks/results/time_to_quality_f32_6min_2026-12-05.json`",
    "[the plot](results/time_to_quality_2026-12-05.png)",
    "--num_train_steps=1000000 and unique_ids from 1000000000, the ids 0x1f and 5000000",
    "a decade of facade work, deadbeef cafe, `--seed=12345`",
    "a journal of the commit (`<first output>.incomplete-<pid>.commit`)",
    "curl -d '{\"b64\": \"Q2Fm6SBbTUFTS10gbGFpdC4=\"}'",
])
def test_a_page_about_the_code_passes(text):
  assert process_passages(text) == []


@pytest.mark.parametrize("page", user_pages())
def test_user_pages_hold_no_process_passages(page):
  with open(os.path.join(REPO_ROOT, page), encoding="utf-8") as f:
    found = process_passages(f.read())
  assert found == [], "\n".join(f"{page}:{n}: {what}: {line[:120]}" for n, what, line in found)
