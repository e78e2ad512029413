//! The inventory the phases' unit tests plan against (tests only).

use crate::inventory::Inventory;

/// Cluster `name`: three stacked control planes (`cp1`-`cp3`, 10.0.0.11-13), `load_balancers`
/// load balancers (`lb1`…, from 10.0.0.21) behind the VIP 10.0.0.100, Kubernetes 1.20.2 from a
/// bundle in `dir` with the lines `kubernetes` added to its section, the state directory under
/// `dir`.
pub fn stacked(dir: &std::path::Path, name: &str, load_balancers: usize, kubernetes: &[&str]) -> Inventory {
    let mut yaml = vec![
        "apiVersion: hactl.io/v1alpha1".to_string(),
        "kind: Cluster".into(),
        "metadata:".into(),
        format!("  name: {name}"),
        "spec:".into(),
        "  ssh:".into(),
        "    agent: true".into(),
        "  hosts:".into(),
    ];
    for i in 1..=3 {
        yaml.push(format!(
            "  - {{ name: cp{i}, address: 10.0.0.1{i}, roles: [etcd, control-plane] }}"
        ));
    }
    for i in 1..=load_balancers {
        yaml.push(format!(
            "  - {{ name: lb{i}, address: 10.0.0.{}, roles: [load-balancer] }}",
            20 + i
        ));
    }
    yaml.extend([
        "  vip:".to_string(),
        "    address: 10.0.0.100".into(),
        "  kubernetes:".into(),
        "    version: 1.20.2".into(),
        "    source: bundle".into(),
        format!("    bundleDir: {}", dir.display()),
    ]);
    yaml.extend(kubernetes.iter().map(|l| format!("    {l}")));
    yaml.push(format!("  stateDir: {}", dir.join("state").display()));
    crate::inventory::load_str(&dir.join(format!("{name}.yaml")), &yaml.join("\n"))
        .unwrap_or_else(|e| panic!("{e}"))
}
