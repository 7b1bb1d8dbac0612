//! Any volley error, for programs that use several layers and pass errors on with `?`.
//!
//! Each layer has its own error enum, in its own folder: [`crate::am::Error`] (sending,
//! handlers, starting the job), [`crate::rma::Error`] (segments and one-sided operations) and
//! [`crate::xfer::Error`] (seed 000's communication segments). A layer's call returns its own
//! error; a layer's error that comes from the layer under it wraps that one (`rma::Error::Am`).
//! [`Error`] is any of them, with the layer under a layer's error unwrapped, so a program
//! matches one level: `Error::Am(am::Error::InvalidRank { .. })` whichever layer was called.

/// Any volley error: the error of the layer whose condition it is.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Active Message layer's (also when a one-sided or xfer call passed it on).
    #[error(transparent)]
    Am(crate::am::Error),
    /// The one-sided layer's own.
    #[error(transparent)]
    Rma(crate::rma::Error),
    /// The xfer layer's own.
    #[error(transparent)]
    Xfer(crate::xfer::Error),
}

impl From<crate::am::Error> for Error {
    fn from(e: crate::am::Error) -> Self {
        Error::Am(e)
    }
}

impl From<crate::rma::Error> for Error {
    fn from(e: crate::rma::Error) -> Self {
        match e {
            crate::rma::Error::Am(e) => Error::Am(e),
            e => Error::Rma(e),
        }
    }
}

impl From<crate::xfer::Error> for Error {
    fn from(e: crate::xfer::Error) -> Self {
        match e {
            crate::xfer::Error::Am(e) => Error::Am(e),
            e => Error::Xfer(e),
        }
    }
}

impl From<crate::bootstrap::BootstrapError> for Error {
    fn from(e: crate::bootstrap::BootstrapError) -> Self {
        Error::Am(e.into())
    }
}

/// Result type for programs that use several layers.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_layers_error_is_unwrapped_to_one_level() {
        let finalized = || crate::am::Error::Finalized;
        assert!(matches!(
            Error::from(crate::rma::Error::Am(finalized())),
            Error::Am(crate::am::Error::Finalized)
        ));
        assert!(matches!(
            Error::from(crate::xfer::Error::Am(finalized())),
            Error::Am(crate::am::Error::Finalized)
        ));
        let space = crate::rma::Error::SegmentSpace { len: 1, area: 0 };
        assert!(matches!(
            Error::from(space),
            Error::Rma(crate::rma::Error::SegmentSpace { .. })
        ));
    }
}
