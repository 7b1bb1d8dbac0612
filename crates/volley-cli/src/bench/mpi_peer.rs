//! A peer measurement: Open MPI's collectives on this machine's shared memory, to report beside
//! volley's own. The MPI program (`mpi_coll.c`, embedded) is compiled with `mpicc` into a
//! temporary directory and run with `mpirun`; rank 0 prints one line of JSON.

use crate::mpi::{self, available};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The MPI program: `mpi_coll ITERS_SCALE REPS`.
const SOURCE: &str = include_str!("mpi_coll.c");

/// How long compiling or running may take before the command is killed.
const DEADLINE: Duration = Duration::from_secs(300);

/// Open MPI's collectives: for each, the median over repetitions of the slowest rank's mean
/// time per call, in nanoseconds.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct MpiColl {
    /// Ranks in the job (read from the MPI program's line; not written, since a run of
    /// `bench coll` flattens these figures beside its own `ranks`).
    #[serde(default, skip_serializing)]
    pub ranks: usize,
    /// `MPI_Barrier`.
    pub mpi_barrier_ns: f64,
    /// `MPI_Bcast` of 8 bytes from rank 0.
    #[serde(rename = "mpi_bcast_8B_ns")]
    pub mpi_bcast_8b_ns: f64,
    /// `MPI_Allreduce` of one `uint64_t` (sum).
    #[serde(rename = "mpi_allreduce_8B_ns")]
    pub mpi_allreduce_8b_ns: f64,
    /// `MPI_Allreduce` of 131072 doubles, 1 MiB (sum).
    #[serde(rename = "mpi_allreduce_1MiB_ns")]
    pub mpi_allreduce_1mib_ns: f64,
    /// `MPI_Alltoall` of 8 bytes per pair of ranks.
    #[serde(rename = "mpi_alltoall_8B_ns")]
    pub mpi_alltoall_8b_ns: f64,
    /// `MPI_Alltoall` of 64 KiB per pair of ranks.
    #[serde(rename = "mpi_alltoall_64KiB_ns")]
    pub mpi_alltoall_64kib_ns: f64,
}

impl MpiColl {
    /// Each figure's median over `reps` measurements (`None` if there are none).
    pub fn median_of(reps: Vec<MpiColl>) -> Option<MpiColl> {
        let first = reps.first()?;
        let med =
            |f: fn(&MpiColl) -> f64| super::median(&mut reps.iter().map(f).collect::<Vec<_>>());
        Some(MpiColl {
            ranks: first.ranks,
            mpi_barrier_ns: med(|m| m.mpi_barrier_ns),
            mpi_bcast_8b_ns: med(|m| m.mpi_bcast_8b_ns),
            mpi_allreduce_8b_ns: med(|m| m.mpi_allreduce_8b_ns),
            mpi_allreduce_1mib_ns: med(|m| m.mpi_allreduce_1mib_ns),
            mpi_alltoall_8b_ns: med(|m| m.mpi_alltoall_8b_ns),
            mpi_alltoall_64kib_ns: med(|m| m.mpi_alltoall_64kib_ns),
        })
    }
}

/// Measures Open MPI's collectives on `ranks` local ranks, iteration counts scaled by `scale`,
/// `reps` repetitions. `Ok(None)` when Open MPI is not installed.
pub fn measure(ranks: usize, scale: f64, reps: usize) -> Result<Option<MpiColl>, String> {
    if !available() {
        return Ok(None);
    }
    if ranks == 0 || reps == 0 || !(scale.is_finite() && scale > 0.0) {
        return Err(format!(
            "MPI collectives: bad parameters (ranks {ranks}, scale {scale}, reps {reps})"
        ));
    }
    let m: MpiColl = mpi::run_json(
        "mpi_coll",
        SOURCE,
        ranks,
        false,
        &[scale.to_string(), reps.to_string()],
        DEADLINE,
    )?;
    // Figures of another job size would sit beside volley's as if they were comparable.
    if m.ranks != ranks {
        return Err(format!(
            "MPI collectives: asked for {ranks} ranks, the program ran on {}",
            m.ranks
        ));
    }
    Ok(Some(m))
}

/// The send/receive ping-pong: `mpi_pingpong ITERS REPS`.
const PINGPONG_SOURCE: &str = include_str!("mpi_pingpong.c");

/// Open MPI's `MPI_Send`/`MPI_Recv` round trip of 8 bytes between two ranks of this machine,
/// ns (median of `reps` blocks of `iters`). `Ok(None)` when Open MPI is not installed.
pub fn sendrecv_rtt_ns(iters: u64, reps: usize) -> Result<Option<f64>, String> {
    if !available() {
        return Ok(None);
    }
    #[derive(Deserialize)]
    struct Line {
        mpi_sendrecv_rtt_ns: f64,
    }
    // Pinned, as volley's ranks are: unbound, a round trip here measures the scheduler as
    // much as Open MPI (3 times slower in a trial).
    let args = [iters.max(1).to_string(), reps.max(1).to_string()];
    mpi::run_json::<Line>("mpi_pingpong", PINGPONG_SOURCE, 2, true, &args, DEADLINE)
        .map(|l| Some(l.mpi_sendrecv_rtt_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rank_0_line() {
        let line = r#"{"ranks": 4, "mpi_barrier_ns": 242.1, "mpi_bcast_8B_ns": 104.1, "mpi_allreduce_8B_ns": 262.3, "mpi_allreduce_1MiB_ns": 363001.0, "mpi_alltoall_8B_ns": 237.4, "mpi_alltoall_64KiB_ns": 37517.0}"#;
        let m: MpiColl = serde_json::from_str(line).unwrap();
        assert_eq!(m.ranks, 4);
        assert_eq!(m.mpi_barrier_ns, 242.1);
        assert_eq!(m.mpi_bcast_8b_ns, 104.1);
        assert_eq!(m.mpi_allreduce_8b_ns, 262.3);
        assert_eq!(m.mpi_allreduce_1mib_ns, 363001.0);
        assert_eq!(m.mpi_alltoall_8b_ns, 237.4);
        assert_eq!(m.mpi_alltoall_64kib_ns, 37517.0);
        // And back to the same keys.
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["mpi_alltoall_64KiB_ns"], 37517.0);
    }

    #[test]
    fn repetitions_combine_into_each_figures_median() {
        let m = |x: f64| MpiColl {
            ranks: 2,
            mpi_barrier_ns: x,
            mpi_bcast_8b_ns: x + 1.0,
            mpi_allreduce_8b_ns: x + 2.0,
            mpi_allreduce_1mib_ns: x + 3.0,
            mpi_alltoall_8b_ns: x + 4.0,
            mpi_alltoall_64kib_ns: x + 5.0,
        };
        let med = MpiColl::median_of(vec![m(500.0), m(200.0), m(250.0)]).unwrap();
        assert_eq!(med.mpi_barrier_ns, 250.0);
        assert_eq!(med.mpi_bcast_8b_ns, 251.0);
        assert_eq!(med.mpi_alltoall_64kib_ns, 255.0);
        assert!(MpiColl::median_of(Vec::new()).is_none());
    }

    #[test]
    fn measures_two_ranks() {
        if !available() {
            eprintln!("mpi_peer: skipped, Open MPI (mpicc, mpirun) is not installed");
            return;
        }
        let m = measure(2, 0.01, 1).unwrap().expect("Open MPI is available");
        assert_eq!(m.ranks, 2);
        let figures = [
            m.mpi_barrier_ns,
            m.mpi_bcast_8b_ns,
            m.mpi_allreduce_8b_ns,
            m.mpi_allreduce_1mib_ns,
            m.mpi_alltoall_8b_ns,
            m.mpi_alltoall_64kib_ns,
        ];
        assert!(figures.iter().all(|f| f.is_finite() && *f > 0.0), "{m:?}");
    }
}
