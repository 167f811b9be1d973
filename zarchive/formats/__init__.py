"""Files other tools write, and conversions: ZANJ files (zanj), torch.save, safetensors, numpy and
Hugging Face sharded folders (foreign), and `zarchive convert` into .zarc (convert_in) and out of it
(convert_out; a whole archive into one .safetensors: archive_to_safetensors). The public front is `zarchive.convert` and `zarchive.open`."""
