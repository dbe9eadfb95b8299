//! The data of the `fft_transpose` example and what a rank reports about its result: the
//! input matrix, the 2-D FFT of it computed in one process with plain rustfft, and a checksum
//! of some columns of the result. `coll/tests/alltoallv_examples.rs` includes this file and
//! computes from it, independently of any run, the checksums every rank must report.

use rustfft::num_complex::Complex64;
use rustfft::FftPlanner;

use crate::data;

/// The matrix is `N` x `N`, unless `--n` says otherwise.
pub const N: usize = 1024;

/// Element `(row, column)` of the input: real and imaginary parts between -1 and 1.
pub fn input(row: usize, column: usize) -> Complex64 {
    let part = |imaginary: u64| {
        let z = data::mix64((row as u64) << 33 | (column as u64) << 1 | imaginary);
        (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    };
    Complex64::new(part(0), part(1))
}

/// Columns `columns` of the 2-D FFT of the `n` x `n` input, each as its `n` values: rustfft
/// along every row, then along each of those columns.
pub fn reference(n: usize, columns: &[usize]) -> Vec<Vec<Complex64>> {
    let fft = FftPlanner::new().plan_fft_forward(n);
    let mut rows: Vec<Complex64> = (0..n * n).map(|i| input(i / n, i % n)).collect();
    fft.process(&mut rows);
    columns
        .iter()
        .map(|&v| {
            let mut column: Vec<Complex64> = (0..n).map(|u| rows[u * n + v]).collect();
            fft.process(&mut column);
            column
        })
        .collect()
}

/// What a rank reports about the columns it holds of a result: a sum of every value weighted
/// by a pseudo-random factor of its position, so that a value in the wrong place shows, and
/// the sum of the values' squared magnitudes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Checksum {
    pub weighted: Complex64,
    pub energy: f64,
}

impl Checksum {
    /// The checksum of `values`, where `values[k]` is column `columns[k]`.
    pub fn of(columns: &[usize], values: &[Vec<Complex64>]) -> Checksum {
        let mut sum = Checksum {
            weighted: Complex64::new(0.0, 0.0),
            energy: 0.0,
        };
        for (&v, column) in columns.iter().zip(values) {
            for (u, value) in column.iter().enumerate() {
                let z = data::mix64((u as u64) << 32 | v as u64 | 1 << 63);
                let weight = (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0;
                sum.weighted += value * weight;
                sum.energy += value.norm_sqr();
            }
        }
        sum
    }
}
