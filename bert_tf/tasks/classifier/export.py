"""run_classifier's export: the fine-tuned classifier as a raw-text SavedModel for TF Serving.

`export_classifier(model, config, settings, info, version)` writes
<output_dir>/export/classifier/<version>/ (TF Serving's layout) with
`serving_module.export_classifier_model`: texts (and pairs) in; labels,
probabilities and logits out, with the run's labels, casing, max_seq_length and length buckets.
The command hands EXPORTER (a model.exporting.Exporter) to the run (tasks.fine_tuning.run).
"""

from typing import Any, Mapping, Optional

from absl import logging
import keras

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import exporting
from bert_tf.tasks.classifier import head as classifier_head
from bert_tf.tasks.classifier import serving_module

MODEL_NAME = "classifier"


def export_classifier(model: keras.Model, config: BertConfig, settings: Any,
                      info: Mapping[str, Any], version: Optional[int] = None,
                      export_dir: Optional[str] = None) -> str:
  """Exports the raw-text classifier to <output_dir>/export/classifier/<version>/.

  Args:
    model: the trained classifier (any dtype policy; a float32 copy is exported).
    config: its BertConfig.
    settings: the run's ClassifierSettings (vocab, casing, max_seq_length, length buckets).
    info: the run's task info (labels, None for regression; pair), written as
      assets/task_info.json.
    version: the version number (the run passes the global step); default the next one.
    export_dir: the model base directory; default <output_dir>/export.

  Returns:
    The version directory written.
  """
  labels = info["labels"]
  float_model = checkpoints.float32_copy(model, lambda: classifier_head.build_classifier_model(
      config, None if labels is None else len(labels)))
  path = serving_module.export_classifier_model(
      float_model, config, settings.vocab_file,
      export_dir or io.join(settings.output_dir, exporting.EXPORT_DIR), labels, info["pair"],
      do_lower_case=settings.do_lower_case, seq_length=settings.max_seq_length,
      version=version, model_name=MODEL_NAME, task_info=info,
      length_buckets=settings.length_buckets)
  logging.info("Exported the classifier for TF Serving to %s", path)
  return path


EXPORTER = exporting.Exporter(MODEL_NAME, export_classifier)
