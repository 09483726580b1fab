//! What an Xid (a critical error the driver reports) usually means, and what the tuning
//! engine does about each class of them: one table, written out in docs/architecture.md
//! (safety rule 7).

use gputune_formats::card::CriticalEvent;

/// What the tuning engine does when a card reports an Xid, by class (docs/architecture.md,
/// safety rule 7). Clock offsets and locks are the tuning an unstable card most likely runs;
/// the engine never writes the fans for an Xid, and never a power limit (a lower one cannot
/// make a card unstable, and the stock voltage/frequency curve is safe at any limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XidResponse {
    /// Most likely an unstable clock: the GPU and memory clock offsets and locks go back.
    ClocksBack,
    /// The card's memory erred (ECC): only a memory overclock can be to blame, so the memory
    /// clock offset and lock go back; the rest stays.
    MemoryClockBack,
    /// Not a tuning's doing (firmware, NVLink): nothing goes back; every client is told.
    NothingBack,
}

/// One class of Xids: the Xids, what they usually mean, and what the engine does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidClass {
    pub xids: &'static [u64],
    pub meaning: &'static str,
    pub response: XidResponse,
}

/// The Xids the engine knows, from NVIDIA's Xid catalog; any other is [`UNKNOWN_XID`].
pub const XID_TABLE: &[XidClass] = &[
    XidClass {
        xids: &[13],
        meaning: "a graphics engine exception, often an unstable clock or offset",
        response: XidResponse::ClocksBack,
    },
    XidClass {
        xids: &[31],
        meaning: "a GPU memory page fault",
        response: XidResponse::ClocksBack,
    },
    XidClass {
        xids: &[43],
        meaning: "the GPU stopped processing",
        response: XidResponse::ClocksBack,
    },
    XidClass {
        xids: &[45],
        meaning: "a context was cleaned up after an error",
        response: XidResponse::ClocksBack,
    },
    XidClass {
        xids: &[48],
        meaning: "a double-bit ECC error",
        response: XidResponse::MemoryClockBack,
    },
    XidClass {
        xids: &[63, 64],
        meaning: "an ECC page retirement",
        response: XidResponse::MemoryClockBack,
    },
    XidClass {
        xids: &[92],
        meaning: "a high single-bit ECC error rate",
        response: XidResponse::MemoryClockBack,
    },
    XidClass {
        xids: &[94, 95],
        meaning: "an ECC error",
        response: XidResponse::MemoryClockBack,
    },
    // Off the bus: what goes back waits in the journal until the card answers again (an
    // overclock can drop a card off the bus as well as crash it).
    XidClass {
        xids: &[79],
        meaning: "the GPU fell off the bus",
        response: XidResponse::ClocksBack,
    },
    XidClass {
        xids: &[61, 62],
        meaning: "an internal micro-controller error",
        response: XidResponse::NothingBack,
    },
    XidClass {
        xids: &[119, 120],
        meaning: "a GSP firmware error",
        response: XidResponse::NothingBack,
    },
    XidClass {
        xids: &[74],
        meaning: "an NVLink error",
        response: XidResponse::NothingBack,
    },
];

/// An Xid the table does not know: when unsure, the tuning goes (a clock put back costs a
/// little speed; an unstable one left costs wrong results).
pub const UNKNOWN_XID: XidClass = XidClass {
    xids: &[],
    meaning: "a GPU error",
    response: XidResponse::ClocksBack,
};

/// What the Xid table says of a critical event: its class, meaning and the response it asks for.
pub trait XidMeaning {
    /// Its row of [`XID_TABLE`].
    fn class(&self) -> &'static XidClass;

    /// What NVIDIA's documentation says an Xid usually means, for the common ones.
    fn meaning(&self) -> &'static str;

    /// What the tuning engine does about it.
    fn response(&self) -> XidResponse;
}

impl XidMeaning for CriticalEvent {
    fn class(&self) -> &'static XidClass {
        XID_TABLE
            .iter()
            .find(|class| class.xids.contains(&self.xid))
            .unwrap_or(&UNKNOWN_XID)
    }

    fn meaning(&self) -> &'static str {
        self.class().meaning
    }

    fn response(&self) -> XidResponse {
        self.class().response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(xid: u64) -> CriticalEvent {
        CriticalEvent { gpu_index: 0, xid }
    }

    #[test]
    fn each_xid_has_one_class_and_an_unknown_one_puts_the_clocks_back() {
        let mut seen = Vec::new();
        for class in XID_TABLE {
            for xid in class.xids {
                assert!(!seen.contains(xid), "Xid {xid} is in two classes");
                seen.push(*xid);
                assert_eq!(event(*xid).class(), class);
            }
        }
        for (xid, response) in [
            (13, XidResponse::ClocksBack),
            (31, XidResponse::ClocksBack),
            (43, XidResponse::ClocksBack),
            (45, XidResponse::ClocksBack),
            (48, XidResponse::MemoryClockBack),
            (63, XidResponse::MemoryClockBack),
            (64, XidResponse::MemoryClockBack),
            (92, XidResponse::MemoryClockBack),
            (94, XidResponse::MemoryClockBack),
            (95, XidResponse::MemoryClockBack),
            (79, XidResponse::ClocksBack),
            (61, XidResponse::NothingBack),
            (62, XidResponse::NothingBack),
            (119, XidResponse::NothingBack),
            (120, XidResponse::NothingBack),
            (74, XidResponse::NothingBack),
        ] {
            assert_eq!(event(xid).response(), response, "Xid {xid}");
        }
        assert_eq!(event(999).class(), &UNKNOWN_XID);
        assert_eq!(event(999).response(), XidResponse::ClocksBack);
        assert_eq!(event(999).meaning(), "a GPU error");
    }
}
