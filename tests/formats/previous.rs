//! Files as the previous release (commit ac1ed75) wrote them.
