#!/usr/bin/env python3
"""A doppler.execution/v1 manifest, in the seed manifest's schema, for a Gemma 4 HF text config.

    make_family_manifest.py CONFIG.json OUT.json [--id ID] [--seed SEED.json] [--profile ID]

The execution contract (manifestInference), the session block (KV cache, decode loop,
session.perLayerInputs), the tokenizer block and the package block are the seed's
(../shared/manifests/litert-gemma-4-12b-it.json), with every shape taken from the config:
runtime.architecture (incl. hiddenSizePerLayerInput, vocabSizePerLayerInput, numKvSharedLayers,
numExperts/numExpertsPerToken/moeIntermediateSize), layer types, window, RoPE, the double-wide MLP,
and a rawConfig that is the config itself. The seed's `unsupported` blocks (about the 12B LiteRT
artifact) and its LiteRT layer lists (queryKeyNormWeightLayers, layerScalarLayers) are dropped: they
describe that one file. tools/manifests/gemma-4-e2b-it.json was made with this from
tools/configs/gemma-4-e2b-shapes.json; the parity tests make tiny ones from tiny configs.

Python is used here for tests and tools only; the engine never imports this.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SEED = Path(os.environ.get("LUMEN_SHARED_DIR", REPO.parent / "shared")) / "manifests" / "litert-gemma-4-12b-it.json"


def manifest_for(cfg: dict, seed: dict, manifest_id: str, profile: str | None = None) -> dict:
    text = cfg.get("text_config", cfg)
    s = copy.deepcopy(seed)
    mi = s["runtime"]["manifestInference"]
    full = text["rope_parameters"]["full_attention"]
    local = text["rope_parameters"]["sliding_attention"]
    ple = text.get("hidden_size_per_layer_input") or 0
    moe = bool(text.get("enable_moe_block"))
    mi.pop("unsupported", None)
    mi["attention"].update(slidingWindow=text["sliding_window"], queryKeyNormWeightLayers=None)
    mi["normalization"]["rmsNormEps"] = text["rms_norm_eps"]
    mi["ffn"]["useDoubleWideMlp"] = bool(text.get("use_double_wide_mlp"))
    mi["rope"].update(ropeTheta=full["rope_theta"], ropeLocalTheta=local["rope_theta"],
                      partialRotaryFactor=full.get("partial_rotary_factor", 1.0),
                      ropeFrequencyBaseDim=text["global_head_dim"])
    mi["output"].update(finalLogitSoftcapping=text.get("final_logit_softcapping"),
                        tieWordEmbeddings=text.get("tie_word_embeddings", True), embeddingVocabSize=text["vocab_size"])
    mi["layerPattern"]["layerTypes"] = list(text["layer_types"])
    if moe:
        mi["moe"] = {"kernelProfileId": None, "supportedActivationDtypes": ["f32"], "preferredActivationDtype": "f32"}
    s["id"] = manifest_id
    arch = {
        "vocabSize": text["vocab_size"], "hiddenSize": text["hidden_size"], "intermediateSize": text["intermediate_size"],
        "numLayers": text["num_hidden_layers"], "numAttentionHeads": text["num_attention_heads"],
        "numKeyValueHeads": text["num_key_value_heads"],
        "numGlobalKeyValueHeads": text.get("num_global_key_value_heads"),
        "headDim": text["head_dim"], "globalHeadDim": text["global_head_dim"],
        "hiddenSizePerLayerInput": ple,
        "vocabSizePerLayerInput": text.get("vocab_size_per_layer_input", text["vocab_size"]) if ple else 0,
        "numKvSharedLayers": text.get("num_kv_shared_layers") or 0,
        "attentionKeyEqualsValue": bool(text.get("attention_k_eq_v")),
        "maxSeqLen": text["max_position_embeddings"],
    }
    if moe:
        arch.update(numExperts=text["num_experts"], numExpertsPerToken=text["top_k_experts"],
                    moeIntermediateSize=text["moe_intermediate_size"])
    s["runtime"]["modelType"] = "gemma4"
    s["runtime"]["architecture"] = arch
    raw_text = {k: v for k, v in text.items() if k not in ("architectures", "per_layer_config")}
    raw_text["model_type"] = "gemma4_text"
    s["runtime"]["rawConfig"] = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
                                 "eos_token_id": [1, 106], "text_config": raw_text}
    tok = s["runtime"]["tokenizer"]["litertlm"]
    tok["vocabSize"] = text["vocab_size"]
    lit = s["package"]["litertlm"]
    lit.pop("unsupported", None)
    lit.pop("layerScalarLayers", None)
    lit["graphAdapter"] = None
    if profile:
        lit["executionTemplateProfileId"] = profile
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--id", default=None)
    ap.add_argument("--seed", default=str(DEFAULT_SEED))
    ap.add_argument("--profile", default=None, help="package.litertlm.executionTemplateProfileId")
    a = ap.parse_args(argv)
    cfg = json.loads(Path(a.config).read_text())
    seed = json.loads(Path(a.seed).read_text())
    m = manifest_for(cfg, seed, a.id or Path(a.out).stem, a.profile)
    Path(a.out).write_text(json.dumps(m, indent=1) + "\n")
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
