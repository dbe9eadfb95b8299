//! `gaspirun -n N program [args...]`: runs a GASPI job on this host. See `gaspirun --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(gaspi_launcher::main())
}
