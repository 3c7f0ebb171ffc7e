"""run_squad's export: the fine-tuned span model as a raw-text question-answering SavedModel.

`export_squad(model, config, settings, info, version)` writes
<output_dir>/export/squad/<version>/ (TF Serving's layout) with
`bert_tf.tasks.squad.serving_module.export_squad_model`: questions and contexts in, the answers of
predictions.json out (windows, max context, n-best and get_final_text all in the graph), with
the run's max_seq_length, doc_stride, max_query_length, n_best_size, max_answer_length, casing,
SQuAD version and null_score_diff_threshold.
"""

import json
from typing import Any, Mapping, Optional

from absl import logging
import keras

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import exporting
from bert_tf.tasks.squad import head as squad_head
from bert_tf.tasks.squad import serving_module as squad_module
from bert_tf.tasks.squad import metrics as squad_metrics

MODEL_NAME = "squad"


def null_score_diff_threshold(settings: Any,
                              info: Mapping[str, Any]) -> float:
  """The threshold the export answers with.

  The flag's value; for "auto" (None) the threshold the run picked: info's
  "null_score_diff_threshold" if given, else the one run_squad's prediction wrote to
  <output_dir>/eval_results.json (prediction runs before the export), else 0.0 (with a warning).
  """
  if settings.null_score_diff_threshold is not None:
    return float(settings.null_score_diff_threshold)
  value = info.get("null_score_diff_threshold")
  if value is None:
    results_file = io.join(settings.output_dir, squad_metrics.EVAL_RESULTS_FILE)
    if io.exists(results_file):
      value = json.loads(io.read_text(results_file)).get("null_score_diff_threshold")
  if value is None:
    logging.warning("--null_score_diff_threshold=auto but no threshold was picked: the export "
                    "answers with 0.0")
    return 0.0
  return float(value)


def export_squad(model: keras.Model, config: BertConfig, settings: Any,
                 info: Mapping[str, Any], version: Optional[int] = None,
                 export_dir: Optional[str] = None) -> str:
  """Exports the question-answering model to <output_dir>/export/squad/<version>/.

  Args:
    model: the trained span model (any dtype policy; a float32 copy is exported).
    config: its BertConfig.
    settings: the run's SquadSettings (vocab, casing, windows, n-best and threshold flags).
    info: the run's task info, written as assets/task_info.json.
    version: the version number (run_squad passes the global step); default the next one.
    export_dir: the model base directory; default <output_dir>/export.

  Returns:
    The version directory written.
  """
  float_model = checkpoints.float32_copy(model, lambda: squad_head.build_span_model(config))
  path = squad_module.export_squad_model(
      float_model, config, settings.vocab_file,
      export_dir or io.join(settings.output_dir, exporting.EXPORT_DIR),
      squad_module.AnswerSettings(
          do_lower_case=settings.do_lower_case, seq_length=settings.max_seq_length,
          doc_stride=settings.doc_stride, max_query_length=settings.max_query_length,
          n_best_size=settings.n_best_size, max_answer_length=settings.max_answer_length,
          version_2_with_negative=settings.version_2_with_negative,
          null_score_diff_threshold=null_score_diff_threshold(settings, info)),
      version=version, model_name=MODEL_NAME, task_info=info,
      length_buckets=settings.length_buckets)
  logging.info("Exported the question-answering model for TF Serving to %s", path)
  return path


EXPORTER = exporting.Exporter(MODEL_NAME, export_squad)
