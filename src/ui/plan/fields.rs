//! The planner inputs that belong to a kind of model: a text model's sequence length, task,
//! method and loss options mean nothing for an image model, and the other way round. Each kind
//! keeps its own values; switching the model to another kind puts the current ones aside and
//! brings back that kind's (or its defaults), so ResNet-50 never gets a "sequence length" of
//! 2048 as its image size, nor "language model" as its task.

use super::{MethodChoice, PlanPanel};
use gputune_core::plan::model::{Architecture, Model};
use gputune_core::plan::setup::{Attention, Checkpointing, Task};

/// Which inputs a model takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// A text transformer: sequence length, language modelling or classification, LoRA.
    Text,
    /// A Vision Transformer: image size, classification, LoRA.
    VisionTransformer,
    /// A convolutional network: image size, classification, every weight trained.
    Convolutional,
}

impl ModelKind {
    pub fn of(model: &Model) -> ModelKind {
        match model.architecture {
            Architecture::Transformer(_) => ModelKind::Text,
            Architecture::Vit(_) => ModelKind::VisionTransformer,
            Architecture::Cnn(_) => ModelKind::Convolutional,
        }
    }

    fn index(self) -> usize {
        match self {
            ModelKind::Text => 0,
            ModelKind::VisionTransformer => 1,
            ModelKind::Convolutional => 2,
        }
    }

    /// Whether the model takes images (the size input is an image size).
    pub fn is_vision(self) -> bool {
        self != ModelKind::Text
    }

    /// Whether LoRA and QLoRA apply (not to a CNN's convolutions).
    pub fn takes_adapters(self) -> bool {
        self != ModelKind::Convolutional
    }
}

/// The inputs one kind of model keeps for itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KindFields {
    /// Tokens per sample, or the image side in pixels.
    pub size: u64,
    pub task: Task,
    pub method: MethodChoice,
    pub attention: Attention,
    pub checkpointing: Checkpointing,
    pub activation_offload: bool,
    pub chunked_cross_entropy: bool,
}

impl KindFields {
    /// What a kind starts with.
    pub fn defaults(kind: ModelKind) -> KindFields {
        match kind {
            ModelKind::Text => KindFields {
                size: 2048,
                task: Task::LanguageModel,
                method: MethodChoice::Qlora,
                attention: Attention::Sdpa,
                checkpointing: Checkpointing::Full,
                activation_offload: false,
                chunked_cross_entropy: false,
            },
            ModelKind::VisionTransformer | ModelKind::Convolutional => KindFields {
                size: 224,
                task: Task::Classification,
                method: MethodChoice::Full,
                attention: Attention::Sdpa,
                checkpointing: Checkpointing::None,
                activation_offload: false,
                chunked_cross_entropy: false,
            },
        }
    }
}

/// The per-kind values a panel keeps aside while another kind of model is chosen.
#[derive(Debug, Clone)]
pub struct KindMemory {
    /// The kind the panel's inputs belong to now.
    current: ModelKind,
    aside: [Option<KindFields>; 3],
}

impl KindMemory {
    /// For inputs that belong to `model`'s kind.
    pub fn new(model: &Model) -> KindMemory {
        KindMemory {
            current: ModelKind::of(model),
            aside: [None; 3],
        }
    }
}

impl PlanPanel {
    /// The current inputs that belong to the model's kind.
    fn kind_fields(&self) -> KindFields {
        KindFields {
            size: self.setup.sequence_length,
            task: self.setup.task,
            method: self.method,
            attention: self.setup.attention,
            checkpointing: self.setup.checkpointing,
            activation_offload: self.setup.activation_offload,
            chunked_cross_entropy: self.setup.chunked_cross_entropy,
        }
    }

    fn set_kind_fields(&mut self, fields: KindFields) {
        self.setup.sequence_length = fields.size;
        self.setup.task = fields.task;
        self.method = fields.method;
        self.setup.attention = fields.attention;
        self.setup.checkpointing = fields.checkpointing;
        self.setup.activation_offload = fields.activation_offload;
        self.setup.chunked_cross_entropy = fields.chunked_cross_entropy;
    }

    /// Brings the inputs in line with the model's kind: when the model changed kind (from the
    /// model list or a file the app opened), the old kind's values are put aside and the new
    /// kind's come back. Called before every frame and every answer.
    pub(crate) fn match_fields_to_model(&mut self) {
        let kind = ModelKind::of(&self.model);
        let previous = std::mem::replace(&mut self.kinds.current, kind);
        if previous == kind {
            return;
        }
        self.kinds.aside[previous.index()] = Some(self.kind_fields());
        let fields = self.kinds.aside[kind.index()]
            .take()
            .unwrap_or_else(|| KindFields::defaults(kind));
        self.set_kind_fields(fields);
        if !kind.takes_adapters() {
            self.method = MethodChoice::Full;
        }
        if kind.is_vision() {
            self.setup.task = Task::Classification;
            self.setup.activation_offload = false;
            self.setup.chunked_cross_entropy = false;
        }
    }
}
