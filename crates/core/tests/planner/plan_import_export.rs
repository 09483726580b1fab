//! Reading models from config.json / safetensors headers, and writing trainer configs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use gputune_core::plan::PlanError;
use gputune_core::plan::export::{
    ExportFormat, export_setup, export_with_notes, model_load_settings,
};
use gputune_core::plan::import::{load_model, read_safetensors_header};
use gputune_core::plan::model::{Architecture, MlpKind, Model, TransformerKind, preset};
use gputune_formats::reports::plan_setup::LoraTargets;
use gputune_formats::reports::plan_setup::{
    Checkpointing, Method, Offload, Optimizer, Precision, Sharding, TrainingSetup,
};

fn fixture(folder: &str, file: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/data/models")
        .join(folder)
        .join(file)
}

fn transformer(model: &Model) -> &gputune_core::plan::model::TransformerConfig {
    match &model.architecture {
        Architecture::Transformer(config) => config,
        other => panic!("{} is not a transformer: {other:?}", model.name),
    }
}

/// Asserts `result` is a `ModelFile` error that names `path` and contains every `words`.
fn assert_file_error<T: std::fmt::Debug>(
    result: Result<T, PlanError>,
    path: &Path,
    words: &[&str],
) {
    let error = result.expect_err("expected an error");
    assert!(matches!(error, PlanError::ModelFile { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    for word in words {
        assert!(message.contains(word), "\"{word}\" missing from: {message}");
    }
}

// ---------------------------------------------------------------------------------------------
// config.json

#[test]
fn real_configs_match_the_presets() {
    for (name, architecture) in [
        ("llama-3.1-8b", "LlamaForCausalLM"),
        ("mistral-7b", "MistralForCausalLM"),
        ("gpt2", "GPT2LMHeadModel"),
        ("bert-base-uncased", "BertForMaskedLM"),
        ("qwen2.5-7b", "Qwen2ForCausalLM"),
        ("vit-b-16", "ViTForImageClassification"),
    ] {
        let path = fixture(name, "config.json");
        let model = load_model(&path).unwrap_or_else(|error| panic!("{name}: {error}"));
        let expected = preset(name).unwrap_or_else(|| panic!("preset {name}"));
        // Without `_name_or_path`, a config names its architecture (not its folder).
        assert_eq!(model.name, architecture);
        assert_eq!(model.exact_parameter_count, None);
        let (count, wanted) = (
            model.parameter_count() as f64,
            expected.parameter_count() as f64,
        );
        assert!(
            (count - wanted).abs() / wanted < 0.005,
            "{name}: {count} vs preset {wanted}"
        );
        assert_eq!(model.architecture, expected.architecture, "{name}");
    }
    let qwen =
        load_model(&fixture("qwen2.5-7b", "config.json")).unwrap_or_else(|error| panic!("{error}"));
    assert!(transformer(&qwen).qkv_bias);
    let bert = load_model(&fixture("bert-base-uncased", "config.json"))
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(transformer(&bert).kind, TransformerKind::EncoderOnly);
}

#[test]
fn a_folder_loads_its_config_json() {
    let model = load_model(&fixture("mistral-7b", "")).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(model.name, "MistralForCausalLM");
    let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    assert_file_error(
        load_model(folder.path()),
        folder.path(),
        &["no config.json"],
    );
}

/// A model is named after what its config says it is: `_name_or_path` (a Hub id as it is, a
/// local path by its last part), else the Hub cache's repository folder
/// (`models--org--name/snapshots/<hash>/`), else its architecture; never the folder the file
/// happens to be in (a snapshot hash in the Hugging Face cache).
#[test]
fn an_imported_model_is_named_after_its_config_not_its_folder() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let gpt2: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("gpt2", "config.json"))
            .unwrap_or_else(|error| panic!("{error}")),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let with = |key: &str, value: Value| {
        let mut config = gpt2.clone();
        config[key] = value;
        config
    };
    let snapshot = "0e9e39f249a16976918f6564b8830bc894c89659";
    let cases = [
        // A Hub id, in a folder named by a hash.
        (
            "a",
            with("_name_or_path", json!("openai-community/gpt2")),
            "openai-community/gpt2",
        ),
        // A local path, by its last part (either separator, a trailing one ignored).
        (
            "b",
            with("_name_or_path", json!("/home/you/checkpoints/my-gpt2/")),
            "my-gpt2",
        ),
        (
            "c",
            with("_name_or_path", json!("C:\\models\\gpt2-finetune")),
            "gpt2-finetune",
        ),
        // Empty (what save_pretrained often writes), or not a string: the architecture.
        ("d", with("_name_or_path", json!("")), "GPT2LMHeadModel"),
        ("e", with("_name_or_path", json!(7)), "GPT2LMHeadModel"),
        // No architectures list: the model type.
        ("f", with("architectures", json!(null)), "gpt2"),
    ];
    for (folder, config, name) in cases {
        let path = write_config(&root.path().join(folder), snapshot, &config);
        let model = load_model(&path).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(model.name, name, "{config}");
        // The folder gives the same name.
        let model = load_model(&path.with_file_name("")).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(model.name, name);
    }

    // In the Hugging Face cache, without _name_or_path: the repository it was downloaded from.
    let cached = root
        .path()
        .join("hub/models--openai-community--gpt2/snapshots");
    let path = write_config(&cached, snapshot, &gpt2);
    let model = load_model(&path).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(model.name, "openai-community/gpt2");
    // A checkpoint there takes the name of the config beside it.
    let checkpoint = path.with_file_name("model.safetensors");
    write_tensors(&checkpoint, &tiny_llama(0..1, true, true));
    let llama = json!({
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "intermediate_size": 512, "vocab_size": 100,
        "_name_or_path": "meta-llama/Llama-3.2-1B",
    });
    std::fs::write(&path, llama.to_string()).unwrap_or_else(|error| panic!("{error}"));
    let model = load_model(&checkpoint).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(model.name, "meta-llama/Llama-3.2-1B");

    // A name is one line of printable text, and short.
    let hostile = with(
        "_name_or_path",
        json!(format!("evil\u{1b}[2J\n{}", "x".repeat(5000))),
    );
    let path = write_config(&root.path().join("g"), snapshot, &hostile);
    let model = load_model(&path).unwrap_or_else(|error| panic!("{error}"));
    assert!(model.name.starts_with("evil\\u{1b}[2J"), "{}", model.name);
    assert!(gputune_core::text::first_unsafe(&model.name).is_none());
    assert!(model.name.chars().count() <= 200, "{}", model.name.len());
}

fn write_config(folder: &Path, name: &str, config: &Value) -> PathBuf {
    let dir = folder.join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{error}"));
    let path = dir.join("config.json");
    std::fs::write(&path, config.to_string()).unwrap_or_else(|error| panic!("{error}"));
    path
}

#[test]
fn unknown_model_types_are_refused_not_guessed() {
    let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    // Llama-like fields are no proof of a Llama layout (Phi-2 and GPT-NeoX have them too).
    let olmo = json!({
        "model_type": "olmo2", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
        "intermediate_size": 8192, "vocab_size": 100352, "tie_word_embeddings": true,
    });
    let path = write_config(folder.path(), "olmo", &olmo);
    assert_file_error(
        load_model(&path),
        &path,
        &[
            "\"olmo2\" is not one gputune knows",
            "gpt_neox",
            "closest preset",
        ],
    );
    let t5 = json!({"model_type": "t5", "d_model": 512, "num_layers": 6, "vocab_size": 32128});
    let path = write_config(folder.path(), "t5", &t5);
    assert_file_error(load_model(&path), &path, &["encoder-decoder"]);
    let gemma3 = json!({"model_type": "gemma3", "text_config": {"hidden_size": 2560}});
    let path = write_config(folder.path(), "gemma3", &gemma3);
    assert_file_error(load_model(&path), &path, &["multimodal", "gemma3_text"]);
    let untyped = json!({
        "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
        "intermediate_size": 8192, "vocab_size": 100352,
    });
    let path = write_config(folder.path(), "untyped", &untyped);
    assert_file_error(load_model(&path), &path, &["no \"model_type\""]);
}

#[test]
fn vit_classes_come_from_the_labels() {
    let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let base = json!({
        "model_type": "vit", "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "patch_size": 16, "image_size": 224,
    });
    let mut labelled = base.clone();
    labelled["id2label"] = json!({"0": "cat", "1": "dog", "2": "bird"});
    let mut numbered = base.clone();
    numbered["num_labels"] = json!(10);
    for (name, config, classes) in [
        ("labelled", labelled, 3),
        ("numbered", numbered, 10),
        ("default", base, 1000),
    ] {
        let model = load_model(&write_config(folder.path(), name, &config))
            .unwrap_or_else(|error| panic!("{error}"));
        match model.architecture {
            Architecture::Vit(vit) => assert_eq!(vit.classes, classes, "{name}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn bad_configs_are_errors_that_name_the_file() {
    let tokenizer = fixture("tokenizer", "tokenizer.json");
    assert_file_error(
        load_model(&tokenizer),
        &tokenizer,
        &["tokenizer", "config.json"],
    );
    let zero = fixture("zero-layers", "config.json");
    assert_file_error(load_model(&zero), &zero, &["0 layers"]);

    let folder = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let cases: [(&str, Value, &[&str]); 8] = [
        (
            "random",
            json!({"name": "my project", "version": 3}),
            &["not a model's config.json"],
        ),
        ("array", json!([1, 2, 3]), &["not a set of model settings"]),
        (
            "unknown-type",
            json!({"model_type": "whisper", "d_model": 512}),
            &["\"whisper\"", "preset"],
        ),
        (
            "missing-field",
            json!({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000}),
            &["\"intermediate_size\" is missing"],
        ),
        (
            "gpt2-missing",
            json!({"model_type": "gpt2", "n_layer": 12, "n_head": 12}),
            &["\"n_embd\""],
        ),
        (
            "string-size",
            json!({"model_type": "bert", "hidden_size": "768", "num_hidden_layers": 12, "num_attention_heads": 12,
                   "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512}),
            &["\"hidden_size\"", "whole number"],
        ),
        (
            "absurd",
            json!({"model_type": "llama", "hidden_size": 1u64 << 40, "num_hidden_layers": 1u64 << 50,
                   "num_attention_heads": 32, "intermediate_size": 1u64 << 60, "vocab_size": 32000}),
            &["beyond any real model"],
        ),
        (
            "uneven-heads",
            json!({"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 30,
                   "intermediate_size": 14336, "vocab_size": 32000}),
            &["divide evenly"],
        ),
    ];
    for (name, config, words) in cases {
        let path = write_config(folder.path(), name, &config);
        assert_file_error(load_model(&path), &path, words);
    }

    let bytes = folder.path().join("config.json");
    std::fs::write(&bytes, [0xff, 0xfe, 0x00, 0x81, 0xc3, 0x28, 0x7b])
        .unwrap_or_else(|error| panic!("{error}"));
    assert_file_error(load_model(&bytes), &bytes, &["not text"]);
    let broken = folder.path().join("broken.json");
    std::fs::write(&broken, "{\"model_type\": \"llama\",")
        .unwrap_or_else(|error| panic!("{error}"));
    assert_file_error(load_model(&broken), &broken, &["not valid JSON"]);
    let missing = folder.path().join("nowhere/config.json");
    assert_file_error(load_model(&missing), &missing, &["cannot be read"]);
}

// ---------------------------------------------------------------------------------------------
// safetensors

fn dtype_size(dtype: &str) -> u64 {
    match dtype {
        "F32" | "I32" => 4,
        "F16" | "BF16" => 2,
        "I64" | "F64" => 8,
        // Stands for a dtype the reader does not know: it trusts the offsets (none here).
        "X9" => 0,
        _ => 1,
    }
}

/// Writes a safetensors file: the header as the format lays it out, then zeroed tensor data
/// (as a sparse file, so no data is written).
fn write_safetensors(path: &Path, tensors: &[(&str, &str, Vec<u64>)]) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0;
    for (name, dtype, shape) in tensors {
        let bytes = shape.iter().product::<u64>() * dtype_size(dtype);
        header.insert(
            (*name).into(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let mut text = Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    write_raw(path, text.len() as u64, text.as_bytes(), offset);
}

fn write_raw(path: &Path, header_length: u64, header: &[u8], data_bytes: u64) {
    let mut bytes = header_length.to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    std::fs::write(path, &bytes).unwrap_or_else(|error| panic!("{error}"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap_or_else(|error| panic!("{error}"));
    file.set_len(bytes.len() as u64 + data_bytes)
        .unwrap_or_else(|error| panic!("{error}"));
}

/// A two-layer Llama-style model: hidden 256, two query heads and one key/value head of 128.
fn tiny_llama(
    layers: std::ops::Range<u64>,
    embeddings: bool,
    head: bool,
) -> Vec<(String, &'static str, Vec<u64>)> {
    let mut tensors = Vec::new();
    if embeddings {
        tensors.push((
            "model.embed_tokens.weight".to_string(),
            "BF16",
            vec![100, 256],
        ));
    }
    for layer in layers {
        let prefix = format!("model.layers.{layer}");
        for (name, dtype, shape) in [
            ("self_attn.q_proj.weight", "BF16", vec![256, 256]),
            ("self_attn.k_proj.weight", "BF16", vec![128, 256]),
            ("self_attn.v_proj.weight", "BF16", vec![128, 256]),
            ("self_attn.o_proj.weight", "BF16", vec![256, 256]),
            ("mlp.gate_proj.weight", "BF16", vec![512, 256]),
            ("mlp.up_proj.weight", "BF16", vec![512, 256]),
            ("mlp.down_proj.weight", "BF16", vec![256, 512]),
            ("input_layernorm.weight", "F32", vec![256]),
            ("post_attention_layernorm.weight", "F32", vec![256]),
        ] {
            tensors.push((format!("{prefix}.{name}"), dtype, shape));
        }
    }
    if head {
        tensors.push(("model.norm.weight".to_string(), "F32", vec![256]));
        tensors.push(("lm_head.weight".to_string(), "F16", vec![100, 256]));
    }
    tensors
}

fn write_tensors(path: &Path, tensors: &[(String, &'static str, Vec<u64>)]) {
    let borrowed: Vec<(&str, &str, Vec<u64>)> = tensors
        .iter()
        .map(|(name, dtype, shape)| (name.as_str(), *dtype, shape.clone()))
        .collect();
    write_safetensors(path, &borrowed);
}

fn new_folder(root: &Path, name: &str) -> PathBuf {
    let folder = root.join(name);
    std::fs::create_dir_all(&folder).unwrap_or_else(|error| panic!("{error}"));
    folder
}

#[test]
fn a_safetensors_header_gives_exact_counts_and_bytes_per_dtype() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let path = new_folder(root.path(), "tiny").join("model.safetensors");
    write_safetensors(
        &path,
        &[
            ("a.weight", "BF16", vec![3, 4]),
            ("a.bias", "F32", vec![4]),
            ("b.weight", "F16", vec![2, 5, 7]),
            ("steps", "I64", vec![]),
            ("mask", "BOOL", vec![9]),
        ],
    );
    let summary = read_safetensors_header(&path).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(summary.parameters, 12 + 4 + 70 + 1 + 9);
    let expected: BTreeMap<String, u64> = [
        ("BF16", 24),
        ("F32", 16),
        ("F16", 140),
        ("I64", 8),
        ("BOOL", 9),
    ]
    .map(|(dtype, bytes)| (dtype.to_string(), bytes))
    .into();
    assert_eq!(summary.bytes_by_dtype, expected);
    // No architecture in these names, and no config.json beside them.
    assert_file_error(load_model(&path), &path, &["config.json"]);
}

#[test]
fn llama_style_checkpoints_are_inferred_from_tensor_names() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let path = new_folder(root.path(), "tiny-llama").join("model.safetensors");
    write_tensors(&path, &tiny_llama(0..2, true, true));
    let summary = read_safetensors_header(&path).unwrap_or_else(|error| panic!("{error}"));
    let per_layer = 2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256 + 2 * 256;
    assert_eq!(summary.parameters, 2 * 100 * 256 + 2 * per_layer + 256);
    assert_eq!(summary.bytes_by_dtype["F16"], 100 * 256 * 2);
    assert_eq!(summary.bytes_by_dtype["F32"], 5 * 256 * 4);

    let model = load_model(&path).unwrap_or_else(|error| panic!("{error}"));
    // The head count is in no tensor: the name says what was assumed.
    assert_eq!(
        model.name,
        "tiny-llama (no config.json: 128-wide heads assumed)"
    );
    assert_eq!(model.exact_parameter_count, Some(summary.parameters));
    let config = transformer(&model);
    let shape = (
        config.layers,
        config.hidden_size,
        config.attention_heads,
        config.kv_heads,
        config.intermediate_size,
        config.vocab_size,
    );
    assert_eq!(shape, (2, 256, 2, 1, 512, 100));
    assert!(!config.tied_embeddings && config.mlp == MlpKind::SwiGlu);
    // The architecture alone gives the same count as the header.
    let from_shapes = Model {
        exact_parameter_count: None,
        ..model.clone()
    };
    assert_eq!(from_shapes.parameter_count(), summary.parameters);
}

#[test]
fn gpt2_style_checkpoints_are_inferred_and_mask_buffers_are_not_parameters() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let path = new_folder(root.path(), "tiny-gpt2").join("model.safetensors");
    let mut tensors = vec![
        ("wte.weight".to_string(), "F32", vec![100, 128]),
        ("wpe.weight".to_string(), "F32", vec![16, 128]),
        ("ln_f.weight".to_string(), "F32", vec![128]),
        ("ln_f.bias".to_string(), "F32", vec![128]),
    ];
    for layer in 0..2 {
        for (name, shape) in [
            ("attn.bias", vec![1, 1, 16, 16]),
            ("attn.c_attn.weight", vec![128, 384]),
            ("attn.c_attn.bias", vec![384]),
            ("attn.c_proj.weight", vec![128, 128]),
            ("attn.c_proj.bias", vec![128]),
            ("ln_1.weight", vec![128]),
            ("ln_1.bias", vec![128]),
            ("ln_2.weight", vec![128]),
            ("ln_2.bias", vec![128]),
            ("mlp.c_fc.weight", vec![128, 512]),
            ("mlp.c_fc.bias", vec![512]),
            ("mlp.c_proj.weight", vec![512, 128]),
            ("mlp.c_proj.bias", vec![128]),
        ] {
            tensors.push((format!("h.{layer}.{name}"), "F32", shape));
        }
    }
    write_tensors(&path, &tensors);
    let summary = read_safetensors_header(&path).unwrap_or_else(|error| panic!("{error}"));
    let model = load_model(&path).unwrap_or_else(|error| panic!("{error}"));
    let config = transformer(&model);
    assert_eq!(
        (
            config.layers,
            config.hidden_size,
            config.attention_heads,
            config.intermediate_size
        ),
        (2, 128, 2, 512)
    );
    assert_eq!(
        (
            config.vocab_size,
            config.learned_positions,
            config.tied_embeddings
        ),
        (100, 16, true)
    );
    let from_shapes = Model {
        exact_parameter_count: None,
        ..model.clone()
    };
    assert_eq!(from_shapes.parameter_count(), summary.parameters);
    let all_elements: u64 = tensors
        .iter()
        .map(|(_, _, shape)| shape.iter().product::<u64>())
        .sum();
    assert_eq!(summary.parameters, all_elements - 2 * 256);
    assert_eq!(summary.bytes_by_dtype["F32"], all_elements * 4);
}

#[test]
fn a_config_json_beside_the_checkpoint_gives_the_architecture() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let folder = new_folder(root.path(), "llama-3.1-8b");
    std::fs::copy(
        fixture("llama-3.1-8b", "config.json"),
        folder.join("config.json"),
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let path = folder.join("model.safetensors");
    write_tensors(&path, &tiny_llama(0..1, true, false));
    let summary = read_safetensors_header(&path).unwrap_or_else(|error| panic!("{error}"));
    let model = load_model(&path).unwrap_or_else(|error| panic!("{error}"));
    let expected = preset("llama-3.1-8b").unwrap_or_else(|| panic!("preset"));
    assert_eq!(model.architecture, expected.architecture);
    assert_eq!(model.exact_parameter_count, Some(summary.parameters));

    // A broken config.json beside the checkpoint is reported as itself.
    std::fs::write(folder.join("config.json"), "{}").unwrap_or_else(|error| panic!("{error}"));
    assert_file_error(
        load_model(&path),
        &folder.join("config.json"),
        &["model_type"],
    );
}

#[test]
fn sharded_checkpoints_read_every_shard_named_in_the_index() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let folder = new_folder(root.path(), "sharded");
    let first = folder.join("model-00001-of-00002.safetensors");
    let second = folder.join("model-00002-of-00002.safetensors");
    write_tensors(&first, &tiny_llama(0..1, true, false));
    write_tensors(&second, &tiny_llama(1..2, false, true));
    let total = read_safetensors_header(&first)
        .map(|summary| summary.parameters)
        .unwrap_or(0)
        + read_safetensors_header(&second)
            .map(|summary| summary.parameters)
            .unwrap_or(0);

    // Without the index or a config.json, a lone shard is only part of a model: refused, with
    // what to download.
    assert_file_error(
        load_model(&first),
        &first,
        &[
            "shard 1 of 2",
            "model.safetensors.index.json",
            "every shard",
        ],
    );
    // With the config.json beside it, the config describes the whole model.
    let config = json!({
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 1, "intermediate_size": 512, "vocab_size": 100,
    });
    let config_path = folder.join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap_or_else(|error| panic!("{error}"));
    let model = load_model(&first).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        (model.name.as_str(), model.exact_parameter_count),
        ("llama", None)
    );
    assert_eq!(transformer(&model).layers, 2);
    std::fs::remove_file(&config_path).unwrap_or_else(|error| panic!("{error}"));

    let mut weight_map = serde_json::Map::new();
    for (tensors, file) in [
        (
            tiny_llama(0..1, true, false),
            "model-00001-of-00002.safetensors",
        ),
        (
            tiny_llama(1..2, false, true),
            "model-00002-of-00002.safetensors",
        ),
    ] {
        for (name, _, _) in tensors {
            weight_map.insert(name, json!(file));
        }
    }
    let index = folder.join("model.safetensors.index.json");
    let index_json = json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(&index, index_json.to_string()).unwrap_or_else(|error| panic!("{error}"));
    assert_file_error(
        load_model(&index),
        &index,
        &["index of a sharded checkpoint"],
    );
    for shard in [&first, &second] {
        let model = load_model(shard).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(
            model.name,
            "sharded (no config.json: 128-wide heads assumed)"
        );
        assert_eq!(model.exact_parameter_count, Some(total));
        assert_eq!(transformer(&model).layers, 2);
    }

    std::fs::remove_file(&second).unwrap_or_else(|error| panic!("{error}"));
    assert_file_error(
        load_model(&first),
        &first,
        &["model-00002-of-00002.safetensors", "download every shard"],
    );
}

#[test]
fn broken_safetensors_are_errors_that_name_the_file() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let path = |name: &str| root.path().join(name);

    let short = path("short.safetensors");
    std::fs::write(&short, [1, 2, 3]).unwrap_or_else(|error| panic!("{error}"));
    assert_file_error(load_model(&short), &short, &["too short"]);

    let truncated_header = path("truncated-header.safetensors");
    write_raw(&truncated_header, 1_000, b"{\"a\": {\"dtype\": \"F32\"", 0);
    assert_file_error(
        read_safetensors_header(&truncated_header),
        &truncated_header,
        &["truncated", "download it again"],
    );

    let truncated_data = path("truncated-data.safetensors");
    let header = br#"{"w":{"dtype":"F32","shape":[1000],"data_offsets":[0,4000]}}"#;
    write_raw(&truncated_data, header.len() as u64, header, 100);
    assert_file_error(
        load_model(&truncated_data),
        &truncated_data,
        &["truncated", "\"w\""],
    );

    for (name, length) in [
        ("huge.safetensors", 1u64 << 40),
        ("max.safetensors", u64::MAX),
        ("just-over.safetensors", 100_000_001),
    ] {
        let huge = path(name);
        write_raw(&huge, length, b"{}", 0);
        assert_file_error(load_model(&huge), &huge, &["header length", "100 MB"]);
    }

    let not_json = path("not-json.safetensors");
    write_raw(
        &not_json,
        8,
        &[0xff, 0x00, 0x13, 0x37, 0xff, 0xfe, 0x00, 0x01],
        0,
    );
    assert_file_error(load_model(&not_json), &not_json, &["not valid JSON"]);

    let cases: [(&str, &[u8], &str); 4] = [
        (
            "wrong-size.safetensors",
            br#"{"w":{"dtype":"F32","shape":[10],"data_offsets":[0,8]}}"#,
            "10 F32 values but 8 bytes",
        ),
        (
            "no-shape.safetensors",
            br#"{"w":{"dtype":"F32","data_offsets":[0,8]}}"#,
            "no valid dtype",
        ),
        (
            "backwards.safetensors",
            br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#,
            "no valid dtype",
        ),
        (
            "overflow.safetensors",
            br#"{"w":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}}"#,
            "no valid dtype",
        ),
    ];
    for (name, header, words) in cases {
        let file = path(name);
        write_raw(&file, header.len() as u64, header, 64);
        assert_file_error(load_model(&file), &file, &[words]);
    }

    // Absurd shapes in plausible tensor names are refused before any arithmetic overflows.
    let absurd = new_folder(root.path(), "absurd").join("model.safetensors");
    let mut tensors = tiny_llama(0..1, true, true);
    tensors[0] = (
        "model.embed_tokens.weight".to_string(),
        "X9",
        vec![1 << 30, 256],
    );
    write_tensors(&absurd, &tensors);
    assert_file_error(load_model(&absurd), &absurd, &["beyond any real model"]);
}

#[test]
fn random_bytes_never_panic() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..300 {
        let length = (next() % 64) as usize;
        let mut bytes: Vec<u8> = (0..length).map(|_| next() as u8).collect();
        if round % 3 == 0 && bytes.len() > 8 {
            // A small plausible header length so the JSON parser sees the rest.
            let header_length = (bytes.len() - 8) as u64;
            bytes[..8].copy_from_slice(&header_length.to_le_bytes());
            bytes[8] = b'{';
        }
        for name in ["x.safetensors", "config.json", "weights"] {
            let path = root.path().join(name);
            std::fs::write(&path, &bytes).unwrap_or_else(|error| panic!("{error}"));
            assert!(load_model(&path).is_err(), "{bytes:?} loaded as a model");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile files: FIFOs, devices, links to them, huge sparse files, folders, terminal escapes.

/// Generous: every refusal below is immediate; a read that blocked would never return at all.
const QUICKLY: std::time::Duration = std::time::Duration::from_secs(10);

/// What `kind` names, made at `path`, and the words its error must hold.
fn plant_hostile(path: &Path, kind: &str) -> &'static str {
    let fail = |error: std::io::Error| panic!("{}: {error}", path.display());
    match kind {
        "fifo" => {
            nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU)
                .unwrap_or_else(|error| panic!("{error}"));
            "FIFO"
        }
        "dev-zero-link" => {
            std::os::unix::fs::symlink("/dev/zero", path).unwrap_or_else(fail);
            "character device"
        }
        "fifo-link" => {
            let target = path.with_extension("target-fifo");
            nix::unistd::mkfifo(&target, nix::sys::stat::Mode::S_IRWXU)
                .unwrap_or_else(|error| panic!("{error}"));
            std::os::unix::fs::symlink(&target, path).unwrap_or_else(fail);
            "FIFO"
        }
        "folder" => {
            std::fs::create_dir(path).unwrap_or_else(fail);
            "folder"
        }
        _ => unreachable!("{kind}"),
    }
}

const HOSTILE_KINDS: [&str; 4] = ["fifo", "dev-zero-link", "fifo-link", "folder"];

/// A 10 GiB file that holds no data (sparse: it costs no disk).
fn plant_sparse(path: &Path, start: &[u8]) {
    std::fs::write(path, start).unwrap_or_else(|error| panic!("{error}"));
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|file| file.set_len(10 << 30))
        .unwrap_or_else(|error| panic!("{error}"));
}

#[test]
fn fifos_devices_links_and_folders_are_refused_quickly_by_every_reader() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let started = std::time::Instant::now();
    let dev_zero = Path::new("/dev/zero");
    assert_file_error(load_model(dev_zero), dev_zero, &["character device"]);
    assert_file_error(
        read_safetensors_header(dev_zero),
        dev_zero,
        &["character device"],
    );
    for kind in HOSTILE_KINDS {
        let folder = new_folder(root.path(), kind);
        // As the file given, under each name the reader treats differently.
        for name in ["config.json", "model.safetensors", "weights"] {
            let path = folder.join(name);
            let words = plant_hostile(&path, kind);
            // (A folder given as the model is looked into: "this folder has no config.json".)
            assert_file_error(load_model(&path), &path, &[words]);
            assert_file_error(read_safetensors_header(&path), &path, &[words]);
        }
    }
    // A folder given as the model reads the config.json inside, whatever that is.
    for kind in ["fifo", "dev-zero-link", "fifo-link"] {
        let folder = new_folder(root.path(), &format!("model-{kind}"));
        let config = folder.join("config.json");
        let words = plant_hostile(&config, kind);
        assert_file_error(load_model(&folder), &config, &[words]);
    }
    let no_config = new_folder(root.path(), "no-config");
    assert_file_error(load_model(&no_config), &no_config, &["no config.json"]);
    assert!(started.elapsed() < QUICKLY, "took {:?}", started.elapsed());
}

#[test]
fn huge_sparse_files_are_refused_without_being_read() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let started = std::time::Instant::now();
    let config = root.path().join("config.json");
    plant_sparse(&config, b"{\"model_type\": \"llama\", ");
    assert_file_error(load_model(&config), &config, &["10737 MB", "too large"]);
    // No telling extension: not a safetensors start, so read as JSON, and refused by size.
    let weights = root.path().join("weights");
    plant_sparse(&weights, b"");
    assert_file_error(load_model(&weights), &weights, &["too large"]);
    // A safetensors file: only its header is read, and a zero header length is no header.
    let checkpoint = root.path().join("model.safetensors");
    plant_sparse(&checkpoint, b"");
    assert_file_error(load_model(&checkpoint), &checkpoint, &["not valid JSON"]);
    // The largest header length the reader accepts, in a file big enough to hold it: refused
    // as too large for a header without allocating the 10 GiB.
    let huge_header = root.path().join("huge-header.safetensors");
    plant_sparse(&huge_header, &(8u64 << 30).to_le_bytes());
    assert_file_error(
        read_safetensors_header(&huge_header),
        &huge_header,
        &["header length", "100 MB"],
    );
    assert!(started.elapsed() < QUICKLY, "took {:?}", started.elapsed());
}

#[test]
fn hostile_files_beside_a_checkpoint_are_reported_as_themselves() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let started = std::time::Instant::now();
    // What `kind` names at `path`; a sparse file starts with `{` (JSON that is cut short).
    let plant = |path: &Path, kind: &str| -> &'static str {
        if kind == "sparse" {
            plant_sparse(path, b"{");
            "too large"
        } else {
            plant_hostile(path, kind)
        }
    };
    for kind in HOSTILE_KINDS.into_iter().chain(["sparse"]) {
        // The config.json beside the checkpoint.
        let folder = new_folder(root.path(), &format!("config-{kind}"));
        let checkpoint = folder.join("model.safetensors");
        write_tensors(&checkpoint, &tiny_llama(0..1, true, true));
        let config = folder.join("config.json");
        let words = plant(&config, kind);
        assert_file_error(load_model(&checkpoint), &config, &[words]);
        // The header alone does not look at the folder.
        assert!(read_safetensors_header(&checkpoint).is_ok());

        // The shard index beside a shard.
        let folder = new_folder(root.path(), &format!("index-{kind}"));
        let shard = folder.join("model-00001-of-00002.safetensors");
        write_tensors(&shard, &tiny_llama(0..1, true, false));
        let index = folder.join("model.safetensors.index.json");
        let words = plant(&index, kind);
        assert_file_error(load_model(&shard), &index, &[words]);

        // A shard the index lists (a sparse one: its first byte is no header length).
        let folder = new_folder(root.path(), &format!("shard-{kind}"));
        let first = folder.join("model-00001-of-00002.safetensors");
        let second = folder.join("model-00002-of-00002.safetensors");
        write_tensors(&first, &tiny_llama(0..1, true, false));
        let words = match plant(&second, kind) {
            "too large" => "not valid JSON",
            words => words,
        };
        let index = json!({"weight_map": {
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
        }});
        std::fs::write(
            folder.join("model.safetensors.index.json"),
            index.to_string(),
        )
        .unwrap_or_else(|error| panic!("{error}"));
        assert_file_error(load_model(&first), &second, &[words]);
    }
    assert!(started.elapsed() < QUICKLY, "took {:?}", started.elapsed());
}

#[test]
fn paths_and_file_contents_in_messages_are_escaped() {
    let root = tempfile::tempdir().unwrap_or_else(|error| panic!("{error}"));
    let folder = new_folder(root.path(), "\u{1b}[2J\u{202E}model");
    let config = folder.join("config.json");
    std::fs::write(&config, "{\"model_type\": \"\\u001b]0;owned\\u0007\"}")
        .unwrap_or_else(|error| panic!("{error}"));
    let checkpoint = folder.join("model.safetensors");
    let header = br#"{"w\u001b[31m":{"dtype":"F32","shape":[1000],"data_offsets":[0,4000]}}"#;
    write_raw(&checkpoint, header.len() as u64, header, 100);
    let fifo = folder.join("pipe\u{1b}[1m.json");
    plant_hostile(&fifo, "fifo");
    for (result, words) in [
        (load_model(&config).map(|_| ()), "model type"),
        (load_model(&folder).map(|_| ()), "model type"),
        (
            read_safetensors_header(&checkpoint).map(|_| ()),
            "truncated",
        ),
        (load_model(&fifo).map(|_| ()), "FIFO"),
    ] {
        let message = result.expect_err("expected an error").to_string();
        assert!(message.contains(words), "{message}");
        assert!(message.contains("\\u{1b}[2J\\u{202e}model"), "{message}");
        assert!(
            gputune_core::text::first_unsafe(&message).is_none(),
            "{message:?}"
        );
    }
    // A model in a hostile folder is named after its config (a hostile name in the config is
    // shown escaped: an_imported_model_is_named_after_its_config_not_its_folder).
    std::fs::copy(fixture("gpt2", "config.json"), &config)
        .unwrap_or_else(|error| panic!("{error}"));
    let model = load_model(&config).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(model.name, "GPT2LMHeadModel");
}

// ---------------------------------------------------------------------------------------------
// export

fn llama() -> Model {
    preset("llama-3.1-8b").unwrap_or_else(|| panic!("preset"))
}

fn export(setup: &TrainingSetup, format: ExportFormat) -> String {
    export_setup(&llama(), setup, 8, format).unwrap_or_else(|error| panic!("{format:?}: {error}"))
}

/// `from_pretrained`'s and PEFT's settings for `setup` on the Llama model.
fn load_settings(setup: &TrainingSetup) -> Value {
    model_load_settings(&llama(), setup)
}

/// The notes that go with an export, as one text.
fn export_notes(setup: &TrainingSetup, format: ExportFormat) -> String {
    export_with_notes(&llama(), setup, 8, format)
        .unwrap_or_else(|error| panic!("{format:?}: {error}"))
        .notes
        .join("\n")
}

fn export_json(setup: &TrainingSetup, format: ExportFormat) -> Value {
    serde_json::from_str(&export(setup, format))
        .unwrap_or_else(|error| panic!("{format:?} is not JSON: {error}"))
}

/// Checks the YAML's line structure (top-level `key: value`, blocks of two-space indented
/// `key: value`, comments) and returns `block.key` → value.
fn parse_yaml(text: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut block: Option<String> = None;
    let mut block_children = 0;
    for line in text.lines() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        assert!(
            !line.contains('\t') && line.trim_end() == line,
            "bad line: {line:?}"
        );
        let indent = line.len() - line.trim_start().len();
        let (key, value) = line
            .trim_start()
            .split_once(':')
            .unwrap_or_else(|| panic!("not key: value: {line:?}"));
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad key: {line:?}"
        );
        let value = value.trim().to_string();
        assert!(
            !["no", "NO", "yes", "on", "off"].contains(&value.as_str()),
            "unquoted YAML boolean word: {line:?}"
        );
        let full_key = match indent {
            0 => {
                assert!(
                    block.is_none() || block_children > 0,
                    "empty block before {line:?}"
                );
                block = value.is_empty().then(|| key.to_string());
                block_children = 0;
                key.to_string()
            }
            2 => {
                let parent = block
                    .clone()
                    .unwrap_or_else(|| panic!("indented line outside a block: {line:?}"));
                assert!(
                    !value.is_empty(),
                    "nested blocks are not expected: {line:?}"
                );
                block_children += 1;
                format!("{parent}.{key}")
            }
            _ => panic!("unexpected indentation: {line:?}"),
        };
        assert!(
            map.insert(full_key, value).is_none(),
            "duplicate key: {line:?}"
        );
    }
    map
}

fn lora(rank: u64, targets: LoraTargets) -> TrainingSetup {
    TrainingSetup {
        method: Method::Lora { rank, targets },
        ..TrainingSetup::new(4, 2048)
    }
}

fn qlora() -> TrainingSetup {
    TrainingSetup {
        method: Method::Qlora {
            rank: 64,
            targets: LoraTargets::AllLinear,
            double_quantization: true,
        },
        optimizer: Optimizer::PagedAdamw8bit,
        checkpointing: Checkpointing::Full,
        ..TrainingSetup::new(2, 4096)
    }
}

fn fsdp() -> TrainingSetup {
    TrainingSetup {
        gpus: 2,
        sharding: Sharding::Fsdp,
        checkpointing: Checkpointing::Full,
        ..TrainingSetup::new(2, 2048)
    }
}

fn zero3_offload() -> TrainingSetup {
    TrainingSetup {
        gpus: 2,
        sharding: Sharding::Zero3,
        offload: Offload::OptimizerAndParams,
        ..TrainingSetup::new(1, 2048)
    }
}

#[test]
fn full_bf16_mixed_on_one_gpu() {
    let setup = TrainingSetup::new(4, 2048);
    let hf = export_json(&setup, ExportFormat::Hf);
    assert_eq!(hf["per_device_train_batch_size"], 4);
    assert_eq!(hf["gradient_accumulation_steps"], 8);
    assert_eq!(
        (hf["bf16"].as_bool(), hf["fp16"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(hf["optim"], "adamw_torch");
    assert_eq!(hf["gradient_checkpointing"], false);
    // Only TrainingArguments' own keys: what belongs to loading the model comes apart.
    assert!(
        hf.as_object()
            .is_some_and(|args| args.keys().all(|key| !key.starts_with('_')))
    );
    for absent in ["fsdp", "deepspeed", "attn_implementation", "lora_config"] {
        assert!(hf.get(absent).is_none(), "{absent}");
    }
    let load = load_settings(&setup);
    assert_eq!(load["attn_implementation"], "sdpa");
    assert_eq!(load["model"], "llama-3.1-8b");
    for absent in ["lora_config", "quantization_config", "dtype"] {
        assert!(load.get(absent).is_none(), "{absent}");
    }

    let yaml = parse_yaml(&export(&setup, ExportFormat::Accelerate));
    assert_eq!(yaml["compute_environment"], "LOCAL_MACHINE");
    assert_eq!(yaml["distributed_type"], "'NO'");
    assert_eq!(yaml["num_processes"], "1");
    assert_eq!(yaml["mixed_precision"], "bf16");
    assert!(
        !yaml
            .keys()
            .any(|key| key.starts_with("fsdp_config") || key.starts_with("deepspeed_config"))
    );

    let ds = export_json(&setup, ExportFormat::Deepspeed);
    assert_eq!(ds["train_micro_batch_size_per_gpu"], 4);
    assert_eq!(ds["gradient_accumulation_steps"], 8);
    assert_eq!(ds["bf16"]["enabled"], true);
    assert_eq!(ds["fp16"]["enabled"], false);
    assert_eq!(ds["zero_optimization"], json!({"stage": 0}));
    assert_eq!(ds["gradient_clipping"], 1.0);
}

#[test]
fn lora_exports() {
    let load = load_settings(&lora(16, LoraTargets::Attention));
    assert_eq!(
        load["lora_config"],
        json!({"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]})
    );
    // The frozen model loads in the compute type, as the plan counts it.
    assert_eq!(load["dtype"], "bfloat16");
    let notes = export_notes(&lora(16, LoraTargets::Attention), ExportFormat::Hf);
    assert!(
        notes.contains("get_peft_model(model, LoraConfig("),
        "{notes}"
    );
    assert!(notes.contains("dtype=torch.bfloat16"), "{notes}");
    let load = load_settings(&lora(8, LoraTargets::AllLinear));
    assert_eq!(load["lora_config"]["target_modules"], "all-linear");
    assert!(load.get("quantization_config").is_none());

    // Other architectures name their attention layers differently.
    for (name, modules) in [
        ("gpt2", json!(["c_attn", "attn.c_proj"])),
        (
            "bert-base-uncased",
            json!(["query", "key", "value", "attention.output.dense"]),
        ),
    ] {
        let model = preset(name).unwrap_or_else(|| panic!("preset"));
        let load = model_load_settings(&model, &lora(8, LoraTargets::Attention));
        assert_eq!(load["lora_config"]["target_modules"], modules, "{name}");
    }

    let yaml = parse_yaml(&export(
        &lora(16, LoraTargets::Attention),
        ExportFormat::Accelerate,
    ));
    assert_eq!(yaml["mixed_precision"], "bf16");
    let ds = export_json(&lora(16, LoraTargets::Attention), ExportFormat::Deepspeed);
    assert_eq!(ds["zero_optimization"]["stage"], 0);
}

#[test]
fn qlora_exports() {
    let hf = export_json(&qlora(), ExportFormat::Hf);
    assert_eq!(hf["optim"], "paged_adamw_8bit");
    assert_eq!(hf["gradient_checkpointing"], true);
    assert_eq!(hf["per_device_train_batch_size"], 2);
    let load = load_settings(&qlora());
    assert_eq!(load["lora_config"]["r"], 64);
    assert_eq!(load["lora_config"]["lora_alpha"], 128);
    assert_eq!(
        load["quantization_config"],
        json!({"load_in_4bit": true, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true, "bnb_4bit_compute_dtype": "bfloat16"})
    );
    let fp16 = TrainingSetup {
        precision: Precision::Fp16Mixed,
        ..qlora()
    };
    let hf = export_json(&fp16, ExportFormat::Hf);
    assert_eq!(
        load_settings(&fp16)["quantization_config"]["bnb_4bit_compute_dtype"],
        "float16"
    );
    assert!(
        export_notes(&fp16, ExportFormat::Hf).contains("BitsAndBytesConfig("),
        "the notes say how to load the 4-bit model"
    );
    assert_eq!(
        (hf["bf16"].as_bool(), hf["fp16"].as_bool()),
        (Some(false), Some(true))
    );

    let yaml = parse_yaml(&export(&fp16, ExportFormat::Accelerate));
    assert_eq!(yaml["mixed_precision"], "fp16");
    let ds = export_json(&fp16, ExportFormat::Deepspeed);
    assert_eq!(ds["fp16"]["enabled"], true);
    assert_eq!(ds["fp16"]["loss_scale"], 0);
    assert_eq!(ds["bf16"]["enabled"], false);

    // Sharded QLoRA stores the 4-bit weights in the compute type.
    let sharded = TrainingSetup {
        gpus: 2,
        sharding: Sharding::Zero3,
        ..qlora()
    };
    assert_eq!(
        load_settings(&sharded)["quantization_config"]["bnb_4bit_quant_storage"],
        "bfloat16"
    );
}

#[test]
fn fsdp_on_two_gpus() {
    let hf = export_json(&fsdp(), ExportFormat::Hf);
    assert_eq!(hf["fsdp"], "full_shard auto_wrap");
    // Trainer wants FSDP's own activation checkpointing, not gradient_checkpointing, with FSDP.
    assert_eq!(hf["gradient_checkpointing"], false);
    assert_eq!(hf["fsdp_config"]["activation_checkpointing"], true);
    let notes = export_notes(&fsdp(), ExportFormat::Hf);
    assert!(notes.contains("torchrun"), "{notes}");

    let yaml = parse_yaml(&export(&fsdp(), ExportFormat::Accelerate));
    assert_eq!(yaml["distributed_type"], "FSDP");
    assert_eq!(yaml["num_processes"], "2");
    assert_eq!(yaml["fsdp_config"], "");
    assert_eq!(yaml["fsdp_config.fsdp_sharding_strategy"], "FULL_SHARD");
    assert_eq!(
        yaml["fsdp_config.fsdp_auto_wrap_policy"],
        "TRANSFORMER_BASED_WRAP"
    );
    assert_eq!(yaml["fsdp_config.fsdp_offload_params"], "false");
    assert_eq!(yaml["fsdp_config.fsdp_activation_checkpointing"], "true");
    assert_eq!(
        yaml["fsdp_config.fsdp_state_dict_type"],
        "SHARDED_STATE_DICT"
    );

    let offloaded = TrainingSetup {
        offload: Offload::OptimizerAndParams,
        ..fsdp()
    };
    assert_eq!(
        export_json(&offloaded, ExportFormat::Hf)["fsdp"],
        "full_shard auto_wrap offload"
    );
    assert_eq!(
        parse_yaml(&export(&offloaded, ExportFormat::Accelerate))["fsdp_config.fsdp_offload_params"],
        "true"
    );

    // DeepSpeed has no FSDP: the error says what to choose instead.
    let error =
        export_setup(&llama(), &fsdp(), 8, ExportFormat::Deepspeed).expect_err("FSDP as DeepSpeed");
    assert!(error.to_string().contains("zero3"), "{error}");
}

#[test]
fn zero3_with_offload() {
    let hf = export_json(&zero3_offload(), ExportFormat::Hf);
    assert_eq!(hf["deepspeed"], "ds_config.json");
    assert!(hf.get("fsdp").is_none());

    let yaml = parse_yaml(&export(&zero3_offload(), ExportFormat::Accelerate));
    assert_eq!(yaml["distributed_type"], "DEEPSPEED");
    assert_eq!(yaml["num_processes"], "2");
    assert_eq!(yaml["deepspeed_config.zero_stage"], "3");
    assert_eq!(yaml["deepspeed_config.offload_optimizer_device"], "cpu");
    assert_eq!(yaml["deepspeed_config.offload_param_device"], "cpu");
    assert_eq!(yaml["deepspeed_config.gradient_accumulation_steps"], "8");

    let ds = export_json(&zero3_offload(), ExportFormat::Deepspeed);
    let zero = &ds["zero_optimization"];
    assert_eq!(zero["stage"], 3);
    assert_eq!(
        zero["offload_optimizer"],
        json!({"device": "cpu", "pin_memory": true})
    );
    assert_eq!(
        zero["offload_param"],
        json!({"device": "cpu", "pin_memory": true})
    );
    assert_eq!(ds["train_micro_batch_size_per_gpu"], 1);
    assert_eq!(ds["optimizer"]["type"], "AdamW");

    let zero2 = TrainingSetup {
        sharding: Sharding::Zero2,
        offload: Offload::Optimizer,
        ..zero3_offload()
    };
    let ds = export_json(&zero2, ExportFormat::Deepspeed);
    assert_eq!(ds["zero_optimization"]["stage"], 2);
    assert!(ds["zero_optimization"].get("offload_param").is_none());
    assert_eq!(
        parse_yaml(&export(&zero2, ExportFormat::Accelerate))["deepspeed_config.offload_param_device"],
        "none"
    );
}

#[test]
fn setups_a_tool_cannot_express_are_errors_that_say_what_to_change() {
    let cases: [(TrainingSetup, u64, &str); 6] = [
        (
            TrainingSetup {
                sharding: Sharding::Zero2,
                ..zero3_offload()
            },
            8,
            "stage 3",
        ),
        (
            TrainingSetup {
                offload: Offload::Optimizer,
                ..TrainingSetup::new(1, 512)
            },
            8,
            "--sharding",
        ),
        (
            TrainingSetup {
                offload: Offload::Optimizer,
                ..fsdp()
            },
            8,
            "optimizer+params",
        ),
        (
            TrainingSetup {
                optimizer: Optimizer::Adamw8bit,
                ..zero3_offload()
            },
            8,
            "--optimizer adamw",
        ),
        (TrainingSetup::new(1, 512), 0, "between 1 and"),
        (
            TrainingSetup {
                micro_batch: 0,
                ..TrainingSetup::new(1, 512)
            },
            8,
            "micro-batch",
        ),
    ];
    for (setup, steps, words) in cases {
        for format in ExportFormat::ALL {
            let error = export_setup(&llama(), &setup, steps, format).expect_err("an error");
            assert!(matches!(error, PlanError::InvalidInput(_)));
            assert!(error.to_string().contains(words), "{format:?}: {error}");
        }
    }
}

#[test]
fn notes_for_pure_bf16_and_sgd_momentum() {
    let pure = TrainingSetup {
        precision: Precision::Bf16,
        optimizer: Optimizer::SgdMomentum,
        ..TrainingSetup::new(1, 512)
    };
    let hf = export_json(&pure, ExportFormat::Hf);
    assert_eq!(hf["bf16"], true);
    assert_eq!(hf["optim"], "sgd");
    let note = export_notes(&pure, ExportFormat::Hf);
    assert!(
        note.contains("bfloat16") && note.contains("momentum"),
        "{note}"
    );
    assert!(export(&pure, ExportFormat::Accelerate).contains("# Pure bf16"));

    let fp32 = TrainingSetup {
        precision: Precision::Fp32,
        ..TrainingSetup::new(1, 512)
    };
    assert_eq!(
        parse_yaml(&export(&fp32, ExportFormat::Accelerate))["mixed_precision"],
        "'no'"
    );
    let ds = export_json(&fp32, ExportFormat::Deepspeed);
    assert_eq!(
        (
            ds["bf16"]["enabled"].as_bool(),
            ds["fp16"]["enabled"].as_bool()
        ),
        (Some(false), Some(false))
    );
}

#[test]
fn export_format_names() {
    use clap::ValueEnum;
    for format in ExportFormat::ALL {
        assert_eq!(ExportFormat::from_name(format.name()), Some(format));
        let value = format
            .to_possible_value()
            .unwrap_or_else(|| panic!("{format:?}"));
        assert_eq!(value.get_name(), format.name());
    }
    assert_eq!(
        ExportFormat::from_name("DeepSpeed"),
        Some(ExportFormat::Deepspeed)
    );
    assert_eq!(ExportFormat::from_name("yaml"), None);
    assert_eq!(ExportFormat::Deepspeed.file_name(), "ds_config.json");
}

/// The plan counts the expandable-segments allocator only when the job runs with it: every
/// format says so, and none says it for the default allocator.
#[test]
fn every_export_sets_the_expandable_segments_allocator_when_the_plan_counts_it() {
    use gputune_core::plan::export::{ExportFormat, export_with_notes};
    use gputune_formats::reports::plan_setup::{Allocator, Overheads, TrainingSetup};
    let model = gputune_core::plan::model::preset("llama-3.2-1b").expect("a preset");
    for format in ExportFormat::ALL {
        for allocator in [Allocator::Default, Allocator::ExpandableSegments] {
            let setup = TrainingSetup {
                overheads: Overheads {
                    allocator,
                    ..Overheads::default()
                },
                ..TrainingSetup::new(2, 1024)
            };
            let export = export_with_notes(&model, &setup, 1, format).expect("exportable");
            let says = export
                .notes
                .iter()
                .any(|note| note.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
            assert_eq!(
                says,
                allocator == Allocator::ExpandableSegments,
                "{format:?} {allocator:?}: {:?}",
                export.notes
            );
            if format == ExportFormat::Accelerate {
                assert_eq!(
                    export
                        .text
                        .contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
                    says,
                    "the YAML carries it in its comments: {}",
                    export.text
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// every format against every option the plan depends on

/// How an export keeps one option: a key of the file with its value (a JSON pointer for the
/// JSON formats, `block.key` for the YAML), no such key, a note that goes with the file, or a
/// refusal whose message contains the words.
#[derive(Debug, Clone, Copy)]
enum Keeps {
    Key(&'static str, &'static str),
    NoKey(&'static str),
    Note(&'static str),
    Refused(&'static str),
}

use Keeps::{Key, NoKey, Note, Refused};

/// The base setup of the table: one GPU, full fine-tune, bf16 mixed, AdamW, micro-batch 4.
fn base() -> TrainingSetup {
    TrainingSetup::new(4, 2048)
}

fn on_gpus(gpus: u64, sharding: Sharding, setup: TrainingSetup) -> TrainingSetup {
    TrainingSetup {
        gpus,
        sharding,
        ..setup
    }
}

fn with_optimizer(optimizer: Optimizer) -> TrainingSetup {
    TrainingSetup {
        optimizer,
        ..base()
    }
}

fn with_precision(precision: Precision) -> TrainingSetup {
    TrainingSetup {
        precision,
        ..base()
    }
}

/// The value at `key` in an export's text, as a string (JSON strings without their quotes).
fn key_value(format: ExportFormat, text: &str, key: &str) -> Option<String> {
    if format == ExportFormat::Accelerate {
        return parse_yaml(text).get(key).cloned();
    }
    let value: Value = serde_json::from_str(text)
        .unwrap_or_else(|error| panic!("{format:?} is not JSON: {error}\n{text}"));
    value.pointer(key).map(|value| match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    })
}

/// (option, setup, what each of hf, accelerate and deepspeed must do with it). Exports are made
/// with 5 accumulation steps.
fn option_table() -> Vec<(&'static str, TrainingSetup, [Vec<Keeps>; 3])> {
    let zero2 = |setup| on_gpus(2, Sharding::Zero2, setup);
    vec![
        (
            "fp32",
            with_precision(Precision::Fp32),
            [
                vec![Key("/bf16", "false"), Key("/fp16", "false")],
                vec![Key("mixed_precision", "'no'")],
                vec![Key("/bf16/enabled", "false"), Key("/fp16/enabled", "false")],
            ],
        ),
        (
            "fp16-mixed",
            with_precision(Precision::Fp16Mixed),
            [
                vec![Key("/fp16", "true"), Key("/bf16", "false")],
                vec![Key("mixed_precision", "fp16")],
                vec![Key("/fp16/enabled", "true"), Key("/bf16/enabled", "false")],
            ],
        ),
        (
            "bf16-mixed",
            with_precision(Precision::Bf16Mixed),
            [
                vec![Key("/bf16", "true")],
                vec![Key("mixed_precision", "bf16")],
                vec![Key("/bf16/enabled", "true")],
            ],
        ),
        (
            // DeepSpeed keeps an fp32 master copy of bf16 weights: not the plan's pure bf16.
            "bf16 (pure)",
            with_precision(Precision::Bf16),
            [
                vec![Key("/bf16", "true"), Note("dtype=torch.bfloat16")],
                vec![Key("mixed_precision", "bf16"), Note("dtype=torch.bfloat16")],
                vec![Refused("--precision bf16-mixed")],
            ],
        ),
        (
            "bf16 (pure) with ZeRO",
            zero2(with_precision(Precision::Bf16)),
            [
                vec![Refused("--precision bf16-mixed")],
                vec![Refused("--precision bf16-mixed")],
                vec![Refused("--precision bf16-mixed")],
            ],
        ),
        (
            "adamw",
            with_optimizer(Optimizer::Adamw),
            [
                vec![Key("/optim", "adamw_torch")],
                vec![Note(
                    "optimizer = torch.optim.AdamW(model.parameters(), lr=",
                )],
                vec![Key("/optimizer/type", "AdamW")],
            ],
        ),
        (
            "adamw-fused",
            with_optimizer(Optimizer::AdamwFused),
            [
                vec![Key("/optim", "adamw_torch_fused")],
                vec![Note("fused=True")],
                vec![Key("/optimizer/type", "AdamW")],
            ],
        ),
        (
            "adamw-8bit",
            with_optimizer(Optimizer::Adamw8bit),
            [
                vec![Key("/optim", "adamw_bnb_8bit")],
                vec![Note("optimizer = bitsandbytes.optim.AdamW8bit(")],
                vec![
                    NoKey("/optimizer"),
                    Note("optimizer=bitsandbytes.optim.AdamW8bit("),
                    Note("optim=\"adamw_bnb_8bit\""),
                ],
            ],
        ),
        (
            "paged-adamw-8bit",
            with_optimizer(Optimizer::PagedAdamw8bit),
            [
                vec![Key("/optim", "paged_adamw_8bit")],
                vec![Note("bitsandbytes.optim.PagedAdamW8bit(")],
                vec![
                    NoKey("/optimizer"),
                    Note("bitsandbytes.optim.PagedAdamW8bit("),
                ],
            ],
        ),
        (
            "adafactor",
            with_optimizer(Optimizer::Adafactor),
            [
                vec![Key("/optim", "adafactor")],
                vec![Note("Adafactor(")],
                vec![NoKey("/optimizer"), Note("Adafactor(")],
            ],
        ),
        (
            "sgd",
            with_optimizer(Optimizer::Sgd),
            [
                vec![Key("/optim", "sgd")],
                vec![Note("torch.optim.SGD(")],
                vec![NoKey("/optimizer"), Note("torch.optim.SGD(")],
            ],
        ),
        (
            "sgd-momentum",
            with_optimizer(Optimizer::SgdMomentum),
            [
                vec![Key("/optim", "sgd"), Note("momentum=0.9")],
                vec![Note("momentum=0.9")],
                vec![NoKey("/optimizer"), Note("momentum=0.9")],
            ],
        ),
        (
            // DeepSpeed refuses an optimizer of its own choosing under ZeRO unless told.
            "adamw-8bit with ZeRO",
            zero2(with_optimizer(Optimizer::Adamw8bit)),
            [
                vec![
                    Key("/optim", "adamw_bnb_8bit"),
                    Key("/deepspeed", "ds_config.json"),
                ],
                vec![
                    Key("deepspeed_config.zero_stage", "2"),
                    Note("bitsandbytes.optim.AdamW8bit("),
                ],
                vec![
                    Key("/zero_allow_untested_optimizer", "true"),
                    Note("bitsandbytes.optim.AdamW8bit("),
                ],
            ],
        ),
        (
            "adamw with ZeRO",
            zero2(with_optimizer(Optimizer::Adamw)),
            [
                vec![Key("/optim", "adamw_torch")],
                vec![Note("torch.optim.AdamW(")],
                vec![
                    Key("/optimizer/type", "AdamW"),
                    NoKey("/zero_allow_untested_optimizer"),
                ],
            ],
        ),
        (
            "checkpointing",
            TrainingSetup {
                checkpointing: Checkpointing::Full,
                ..base()
            },
            [
                vec![Key("/gradient_checkpointing", "true")],
                vec![Note("model.gradient_checkpointing_enable()")],
                vec![
                    Note("model.gradient_checkpointing_enable()"),
                    Note("gradient_checkpointing=True"),
                ],
            ],
        ),
        (
            "no checkpointing",
            base(),
            [
                vec![Key("/gradient_checkpointing", "false")],
                vec![],
                vec![],
            ],
        ),
        (
            "checkpointing with FSDP",
            on_gpus(
                2,
                Sharding::Fsdp,
                TrainingSetup {
                    checkpointing: Checkpointing::Full,
                    ..base()
                },
            ),
            [
                vec![
                    Key("/fsdp_config/activation_checkpointing", "true"),
                    Key("/gradient_checkpointing", "false"),
                ],
                vec![Key("fsdp_config.fsdp_activation_checkpointing", "true")],
                vec![Refused("--sharding zero3")],
            ],
        ),
        (
            "micro-batch 3",
            TrainingSetup {
                micro_batch: 3,
                ..base()
            },
            [
                vec![Key("/per_device_train_batch_size", "3")],
                vec![Note("batch_size=3")],
                vec![Key("/train_micro_batch_size_per_gpu", "3")],
            ],
        ),
        (
            "accumulation",
            base(),
            [
                vec![Key("/gradient_accumulation_steps", "5")],
                vec![Note("Accelerator(gradient_accumulation_steps=5)")],
                vec![Key("/gradient_accumulation_steps", "5")],
            ],
        ),
        (
            "accumulation with ZeRO",
            zero2(base()),
            [
                vec![Key("/gradient_accumulation_steps", "5")],
                vec![Key("deepspeed_config.gradient_accumulation_steps", "5")],
                vec![Key("/gradient_accumulation_steps", "5")],
            ],
        ),
        (
            "ddp",
            on_gpus(2, Sharding::Ddp, base()),
            [
                vec![Note("torchrun --nproc_per_node 2")],
                vec![
                    Key("distributed_type", "MULTI_GPU"),
                    Key("num_processes", "2"),
                ],
                vec![Note("deepspeed --num_gpus 2")],
            ],
        ),
        (
            "fsdp",
            on_gpus(2, Sharding::Fsdp, base()),
            [
                vec![Key("/fsdp", "full_shard auto_wrap")],
                vec![
                    Key("distributed_type", "FSDP"),
                    Key("fsdp_config.fsdp_sharding_strategy", "FULL_SHARD"),
                ],
                vec![Refused("--sharding zero3")],
            ],
        ),
        (
            "zero1",
            on_gpus(2, Sharding::Zero1, base()),
            [
                vec![Key("/deepspeed", "ds_config.json"), Note("ds_config.json")],
                vec![Key("deepspeed_config.zero_stage", "1")],
                vec![Key("/zero_optimization/stage", "1")],
            ],
        ),
        (
            "zero3",
            on_gpus(2, Sharding::Zero3, base()),
            [
                vec![Key("/deepspeed", "ds_config.json")],
                vec![Key("deepspeed_config.zero_stage", "3")],
                vec![Key("/zero_optimization/stage", "3")],
            ],
        ),
        (
            "zero2 + optimizer offload",
            TrainingSetup {
                offload: Offload::Optimizer,
                ..zero2(base())
            },
            [
                vec![Key("/deepspeed", "ds_config.json")],
                vec![
                    Key("deepspeed_config.offload_optimizer_device", "cpu"),
                    Key("deepspeed_config.offload_param_device", "none"),
                ],
                vec![
                    Key("/zero_optimization/offload_optimizer/device", "cpu"),
                    NoKey("/zero_optimization/offload_param"),
                ],
            ],
        ),
        (
            "zero3 + optimizer+params offload",
            TrainingSetup {
                offload: Offload::OptimizerAndParams,
                ..on_gpus(2, Sharding::Zero3, base())
            },
            [
                vec![Key("/deepspeed", "ds_config.json")],
                vec![Key("deepspeed_config.offload_param_device", "cpu")],
                vec![Key("/zero_optimization/offload_param/device", "cpu")],
            ],
        ),
        (
            "fsdp + optimizer+params offload",
            TrainingSetup {
                offload: Offload::OptimizerAndParams,
                ..on_gpus(2, Sharding::Fsdp, base())
            },
            [
                vec![Key("/fsdp", "full_shard auto_wrap offload")],
                vec![Key("fsdp_config.fsdp_offload_params", "true")],
                vec![Refused("--sharding zero3")],
            ],
        ),
        (
            "offload without sharding",
            TrainingSetup {
                offload: Offload::Optimizer,
                ..base()
            },
            [
                vec![Refused("--sharding")],
                vec![Refused("--sharding")],
                vec![Refused("--sharding")],
            ],
        ),
        (
            "expandable-segments allocator",
            TrainingSetup {
                overheads: gputune_formats::reports::plan_setup::Overheads {
                    allocator: gputune_formats::reports::plan_setup::Allocator::ExpandableSegments,
                    ..gputune_formats::reports::plan_setup::Overheads::default()
                },
                ..base()
            },
            [
                vec![Note("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")],
                vec![Note("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")],
                vec![Note("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")],
            ],
        ),
    ]
}

/// Each format keeps each option the plan counts (in the file, or as a note that goes with
/// it), or refuses the setup saying what to change: an export followed as written runs the
/// setup the plan sized.
#[test]
fn every_format_keeps_every_option_the_plan_depends_on_or_refuses() {
    let mut failures = Vec::new();
    for (option, setup, expected) in option_table() {
        for (format, keeps) in ExportFormat::ALL.into_iter().zip(expected) {
            let result = export_with_notes(&llama(), &setup, 5, format);
            for keep in keeps {
                let failure = match (&result, keep) {
                    (Err(error), Refused(words)) => (!error.to_string().contains(words))
                        .then(|| format!("refused without {words:?}: {error}")),
                    (Err(error), _) => Some(format!("refused: {error}")),
                    (Ok(_), Refused(words)) => Some(format!("not refused (wanted {words:?})")),
                    (Ok(export), Key(key, value)) => {
                        let found = key_value(format, &export.text, key);
                        (found.as_deref() != Some(value))
                            .then(|| format!("{key} is {found:?}, not {value:?}"))
                    }
                    (Ok(export), NoKey(key)) => key_value(format, &export.text, key)
                        .map(|found| format!("{key} is set ({found})")),
                    (Ok(export), Note(words)) => {
                        let noted = export.notes.iter().any(|note| note.contains(words));
                        // The YAML carries its notes in its comments.
                        let in_yaml =
                            format != ExportFormat::Accelerate || export.text.contains(words);
                        (!noted || !in_yaml)
                            .then(|| format!("no note with {words:?}: {:?}", export.notes))
                    }
                };
                if let Some(failure) = failure {
                    failures.push(format!("{option} / {}: {failure}", format.name()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every combination of the options, in every format: an export names the optimizer, the
/// checkpointing, the micro-batch, the accumulation and the allocator the plan counted, or
/// refuses with a message that names the option to change.
#[test]
fn no_combination_of_options_is_exported_without_one_of_them() {
    use gputune_formats::reports::plan_setup::{Allocator, Overheads};
    let optimizers = [
        (Optimizer::Adamw, "AdamW("),
        (Optimizer::AdamwFused, "fused=True"),
        (Optimizer::Adamw8bit, ".AdamW8bit("),
        (Optimizer::PagedAdamw8bit, "PagedAdamW8bit("),
        (Optimizer::Adafactor, "Adafactor("),
        (Optimizer::Sgd, "SGD("),
        (Optimizer::SgdMomentum, "momentum=0.9"),
    ];
    let shardings = [
        (1, Sharding::None, Offload::None),
        (2, Sharding::Ddp, Offload::None),
        (2, Sharding::Fsdp, Offload::None),
        (2, Sharding::Fsdp, Offload::OptimizerAndParams),
        (2, Sharding::Zero1, Offload::None),
        (2, Sharding::Zero2, Offload::Optimizer),
        (2, Sharding::Zero3, Offload::OptimizerAndParams),
    ];
    let precisions = [
        Precision::Fp32,
        Precision::Fp16Mixed,
        Precision::Bf16Mixed,
        Precision::Bf16,
    ];
    let mut exported = 0;
    for (optimizer, optimizer_code) in optimizers {
        for (gpus, sharding, offload) in shardings {
            for precision in precisions {
                for checkpointing in [Checkpointing::None, Checkpointing::Full] {
                    for allocator in [Allocator::Default, Allocator::ExpandableSegments] {
                        let setup = TrainingSetup {
                            optimizer,
                            gpus,
                            sharding,
                            offload,
                            precision,
                            checkpointing,
                            micro_batch: 3,
                            overheads: Overheads {
                                allocator,
                                ..Overheads::default()
                            },
                            ..base()
                        };
                        for format in ExportFormat::ALL {
                            let what = format!("{format:?} {setup:?}");
                            let export = match export_with_notes(&llama(), &setup, 5, format) {
                                Ok(export) => export,
                                Err(error) => {
                                    assert!(error.to_string().contains("--"), "{what}: {error}");
                                    continue;
                                }
                            };
                            exported += 1;
                            let all = format!("{}\n{}", export.text, export.notes.join("\n"));
                            let hf_optim = format!("\"optim\": \"{}\"", hf_optim_name(optimizer));
                            let ds_adamw = format == ExportFormat::Deepspeed
                                && matches!(optimizer, Optimizer::Adamw | Optimizer::AdamwFused)
                                && all.contains("\"type\": \"AdamW\"");
                            assert!(
                                all.contains(optimizer_code) || all.contains(&hf_optim) || ds_adamw,
                                "{what}: the optimizer is not named\n{all}"
                            );
                            if checkpointing == Checkpointing::Full {
                                assert!(
                                    all.contains("\"gradient_checkpointing\": true")
                                        || all.contains("activation_checkpointing\": true")
                                        || all.contains("fsdp_activation_checkpointing: true")
                                        || all.contains("gradient_checkpointing_enable()"),
                                    "{what}: checkpointing is not said\n{all}"
                                );
                            }
                            assert!(
                                all.contains(": 3") || all.contains("batch_size=3"),
                                "{what}: no micro-batch\n{all}"
                            );
                            assert!(
                                all.contains(": 5")
                                    || all.contains("gradient_accumulation_steps=5"),
                                "{what}: no accumulation\n{all}"
                            );
                            assert_eq!(
                                all.contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
                                allocator == Allocator::ExpandableSegments,
                                "{what}"
                            );
                        }
                    }
                }
            }
        }
    }
    assert!(exported > 500, "only {exported} exports were made");
}

fn hf_optim_name(optimizer: Optimizer) -> &'static str {
    match optimizer {
        Optimizer::Adamw => "adamw_torch",
        Optimizer::AdamwFused => "adamw_torch_fused",
        Optimizer::Adamw8bit => "adamw_bnb_8bit",
        Optimizer::PagedAdamw8bit => "paged_adamw_8bit",
        Optimizer::Adafactor => "adafactor",
        Optimizer::Sgd | Optimizer::SgdMomentum => "sgd",
    }
}
