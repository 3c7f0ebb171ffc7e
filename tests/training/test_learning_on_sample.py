"""A tiny BERT pretrained on the bundled sample learns within a few hundred steps.

Records are made here with the data_prep library from two disjoint slices of
data_prep/sample/sample_text.txt (training: the start of the first 44 chapters of Emma; held-out
evaluation: the start of the last 12) and the bundled bert-base-uncased vocab; then
bert_tf.training.pretraining.run_pretraining evaluates an untrained tiny model (L=2, H=64, A=2,
I=128) on the held-out records, trains one for 500 steps of 16 examples and evaluates it again.

Thresholds, and why (measured values in brackets, untrained -> trained, held-out records):
  masked-LM accuracy [0.0004 -> 0.099]: the best guess that ignores the input (always the most
    frequent label) scores 0.065 on these records, and a model that only learned the token
    frequencies stops there (learning rates of 2e-3 for 400 steps and 5e-3 for 900 steps left
    it on that plateau). The bar, above 0.08 and at least 0.015 above that baseline (computed
    from the records), needs the encoder's context.
  masked-LM loss [10.32 -> 6.03]: must fall by more than 3 nats.
  next-sentence accuracy [0.348 -> 0.652]: in this budget the head learns the label prior only:
    0.652 is the share of the more frequent label in the eval batches, and a longer run (1200
    steps) did not beat it either, as the two segments of a random pair come from chapters of
    the same novel. The bar is > 0.60 and within 0.02 of that share, plus a lower loss
    [0.695 -> 0.658].
Data, initialisation and record order are seeded, so runs differ only by float rounding.
"""

import collections
import os

import pytest

from bert_tf.config import BertConfig
from bert_tf.data import pretraining_data as create_pretraining_data
from bert_tf.training import distribution
from bert_tf.training import input_pipeline
from bert_tf.training import pretraining
from tests import helpers

# Subprocesses and real training runs: the slow tier (CI runs them).
pytestmark = pytest.mark.slow

REPO_ROOT = helpers.REPO_ROOT
SAMPLE = os.path.join(REPO_ROOT, "data_prep", "sample", "sample_text.txt")
VOCAB = os.path.join(REPO_ROOT, "tests", "data", "vocab_uncased.txt")

SEQ = 64
PREDS = 10
CHARS_PER_CHAPTER = 4000  # the start of each chapter is used
NUM_TRAIN_CHAPTERS = 44  # of 56; the rest are held out for evaluation
DUPE_FACTOR = 5  # 3728 training instances
STEPS = 500
BATCH = 16
LR = 1e-3
EVAL_BATCH = 32
EVAL_STEPS = 8

MIN_MLM_ACCURACY = 0.08
MIN_MLM_GAIN_OVER_BASELINE = 0.015
MIN_NSP_ACCURACY = 0.60


def _chapter_starts(chapters):
  """The first CHARS_PER_CHAPTER characters of each chapter, cut at a line end."""
  starts = []
  for chapter in chapters:
    lines, size = [], 0
    for line in chapter.splitlines():
      if size >= CHARS_PER_CHAPTER:
        break
      lines.append(line)
      size += len(line) + 1
    starts.append("\n".join(lines))
  return "\n\n".join(starts) + "\n"


def _make_records(text, directory, name, dupe_factor, seed):
  text_path = os.path.join(directory, f"{name}.txt")
  with open(text_path, "w", encoding="utf-8") as f:
    f.write(text)
  output = os.path.join(directory, f"{name}.tfrecord")
  summary = create_pretraining_data.run(create_pretraining_data.DataConfig(
      input_patterns=(text_path,), output_files=(output,), vocab_file=VOCAB,
      do_lower_case=True, max_seq_length=SEQ, max_predictions_per_seq=PREDS,
      dupe_factor=dupe_factor, random_seed=seed, num_workers=1))
  return output, summary["instances"]


def _tiny_config():
  return BertConfig(vocab_size=30522, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=2, intermediate_size=128, max_position_embeddings=SEQ,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _context_free_baselines(eval_file):
  """Accuracies of the best guesses that ignore the input, on the batches the eval reads.

  Returns:
    (the weighted share of the most frequent masked-LM label, the share of the more frequent
    next-sentence label).
  """
  dataset = input_pipeline.pretraining_dataset(eval_file, SEQ, PREDS, EVAL_BATCH,
                                               is_training=False, repeat=True)
  labels, nsp = collections.Counter(), collections.Counter()
  for batch in dataset.take(EVAL_STEPS):
    ids = batch["masked_lm_ids"].numpy().ravel()
    weights = batch["masked_lm_weights"].numpy().ravel()
    labels.update(int(i) for i, w in zip(ids, weights) if w > 0)
    nsp.update(int(i) for i in batch["next_sentence_labels"].numpy().ravel())
  return (labels.most_common(1)[0][1] / sum(labels.values()),
          nsp.most_common(1)[0][1] / sum(nsp.values()))


def test_tiny_model_learns_masked_lm_and_next_sentence_on_the_sample(tmp_path):
  with open(SAMPLE, encoding="utf-8") as f:
    chapters = [c for c in f.read().split("\n\n") if c.strip()]
  assert len(chapters) > NUM_TRAIN_CHAPTERS + 4
  train_file, train_count = _make_records(_chapter_starts(chapters[:NUM_TRAIN_CHAPTERS]),
                                          str(tmp_path), "train", DUPE_FACTOR, seed=1)
  eval_file, eval_count = _make_records(_chapter_starts(chapters[NUM_TRAIN_CHAPTERS:]),
                                        str(tmp_path), "eval", 2, seed=2)
  assert train_count >= 3000 and eval_count >= EVAL_BATCH * EVAL_STEPS
  mlm_baseline, nsp_baseline = _context_free_baselines(eval_file)

  common = dict(input_file=train_file, eval_input_file=eval_file, max_seq_length=SEQ,
                max_predictions_per_seq=PREDS, train_batch_size=BATCH,
                eval_batch_size=EVAL_BATCH, max_eval_steps=EVAL_STEPS, learning_rate=LR,
                num_train_steps=STEPS, num_warmup_steps=STEPS // 10,
                save_checkpoints_steps=STEPS, iterations_per_loop=STEPS,
                export_at_end=False, seed=3, do_eval=True)
  strategy = distribution.select_strategy("one_device")
  before = pretraining.run_pretraining(
      _tiny_config(), pretraining.PretrainingSettings(output_dir=str(tmp_path / "untrained"),
                                                   do_train=False, **common), strategy)
  after = pretraining.run_pretraining(
      _tiny_config(), pretraining.PretrainingSettings(output_dir=str(tmp_path / "trained"),
                                                   do_train=True, **common), strategy)
  keys = ("masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy", "next_sentence_loss")
  print("untrained:", {k: round(before[k], 4) for k in keys})
  print("trained:", {k: round(after[k], 4) for k in keys})
  print(f"context-free baselines: masked-LM {mlm_baseline:.4f}, "
        f"next sentence {nsp_baseline:.4f}")
  assert after["global_step"] == STEPS
  # Untrained: chance-level masked-LM guesses, one next-sentence class for (almost) everything.
  assert before["masked_lm_accuracy"] < 0.01
  assert before["masked_lm_loss"] > 10.0  # about ln(30522) = 10.3
  # Trained, on held-out text: masked LM beyond the best guess that ignores the input;
  # next sentence at the label prior (see the module docstring).
  assert after["masked_lm_accuracy"] > MIN_MLM_ACCURACY
  assert after["masked_lm_accuracy"] >= mlm_baseline + MIN_MLM_GAIN_OVER_BASELINE
  assert after["masked_lm_loss"] < before["masked_lm_loss"] - 3.0
  assert after["next_sentence_accuracy"] > MIN_NSP_ACCURACY
  assert after["next_sentence_accuracy"] >= nsp_baseline - 0.02
  assert after["next_sentence_loss"] < before["next_sentence_loss"]
