//! `snbuf report`: a `snbuf bench paper` results directory turned into figures and a report.

use crate::cli::ReportArgs;
use crate::exit::usage;

pub fn run(args: &ReportArgs) -> anyhow::Result<()> {
    let r = snbuf_report::build(&args.results, &args.out).map_err(|e| match e {
        snbuf_report::ReportError::Empty(_) | snbuf_report::ReportError::Parse(..) => {
            usage(e.to_string())
        }
        snbuf_report::ReportError::Io(ref p, ref io)
            if p == &args.results && io.kind() == std::io::ErrorKind::NotFound =>
        {
            usage(e.to_string())
        }
        other => anyhow::Error::new(other),
    })?;
    println!(
        "wrote {} figures (SVG and PNG), {} and {}",
        r.figures.len(),
        r.markdown.display(),
        r.html.display()
    );
    for f in &r.findings {
        println!("check: {f}");
    }
    Ok(())
}
