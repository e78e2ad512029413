//! `hactl kubeconfig`: prints the admin kubeconfig that `hactl up` wrote to the state directory.
//!
//! Invariant: it only reads; it never creates a CA or a key. The kubeconfig carries the
//! cluster-admin key, so it goes to stdout only when stdout is not a terminal (a file, a pipe):
//! keys never land on a screen or in a terminal's scrollback.

use std::io::IsTerminal;

use anyhow::bail;

use crate::cli::KubeconfigArgs;

pub fn run(args: &KubeconfigArgs) -> anyhow::Result<i32> {
    let inv = super::load_inventory(&args.inventory)?;
    let file = args.inventory.inventory.display();
    if inv.kubernetes.is_none() {
        bail!(
            "{file} has no `kubernetes` section, so hactl runs no kube-apiserver and writes no kubeconfig; \
             add one (see `hactl init`) and run `hactl up`"
        );
    }
    let path = inv.state_dir.join(crate::converge::ADMIN_KUBECONFIG);
    let text = match crate::bounded::read_to_string(&path, crate::bounded::TEXT) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "no admin kubeconfig yet at {}: `hactl up -i {file}` writes it",
            path.display()
        ),
        Err(e) => return Err(e.into()),
    };
    if std::io::stdout().is_terminal() {
        bail!(
            "the admin kubeconfig holds the cluster-admin key, so it is not printed to a terminal: \
             redirect it (`hactl kubeconfig -i {file} > admin.kubeconfig`) or use it where it is \
             (`export KUBECONFIG={}`)",
            path.display()
        );
    }
    print!("{text}");
    Ok(super::exit::OK)
}
