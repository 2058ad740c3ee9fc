"""Export a checkpoint for inference runtimes, and embed with an export without torch.

`retrieval.export.onnx_export` (torch) writes an export directory: `model.onnx`, `preprocess.json`,
`manifest.json`. `retrieval.export.onnx_encoder.OnnxEncoder` embeds images with it using only
onnxruntime, numpy and Pillow. Above `inference/` and `index/`, it is also where a model meets an index:
the one choice of `--checkpoint | --model | --backbone` (`encoder_choice`), the model an index records
(`index_encoder`), and the runs of `index build`, `index add`, `index query` and `audit` (`index_build`,
`index_add`, `index_query`, `audit_run`).
This package's own import loads nothing: import the module you need.
"""
