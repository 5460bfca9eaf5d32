//! `allow_anonymous`, `[broker.tls]` and the shared access policies.

use super::*;

#[test]
fn policies_are_read_at_every_level_with_manage_implying_the_others() {
    std::env::set_var("TIDEBUS_TEST_WRITER_KEY", "from-the-environment");
    let config = Config::parse(
        "[[shared_access_policies]]\nname = \"Root\"\nkey = \"root-key\"\nrights = [\"Manage\"]\n\n\
         [[queues]]\nname = \"orders\"\n\
         [[queues.shared_access_policies]]\nname = \"writer\"\n\
         key_env = \"TIDEBUS_TEST_WRITER_KEY\"\nrights = [\"Send\"]\n\n\
         [[topics]]\nname = \"events\"\n\
         [[topics.shared_access_policies]]\nname = \"reader\"\nkey = \"r\"\n\
         rights = [\"listen\", \"Send\"]\n",
        "t.toml",
    )
    .expect("valid");
    let root = &config.shared_access_policies[0];
    assert_eq!(root.name, "Root");
    assert_eq!(root.key, SecretKey::from("root-key"));
    assert_eq!(root.rights, Rights::ANY);
    let writer = &config.queues[0].shared_access_policies[0];
    assert_eq!(writer.key, SecretKey::from("from-the-environment"));
    assert_eq!(writer.rights, Rights::SEND);
    let reader = &config.topics[0].shared_access_policies[0];
    assert_eq!(reader.rights, Rights::SEND.union(Rights::LISTEN));
    assert!(!config.broker.allow_anonymous);
    assert!(
        !format!("{config:?}").contains("root-key"),
        "keys never show in Debug"
    );
}

#[test]
fn a_config_nobody_could_use_is_refused() {
    assert_eq!(
        refusal("[[queues]]\nname = \"q\"\n"),
        "broker.allow_anonymous (t.toml:1:1): is false (the default when absent) and no shared \
         access policy is declared, so no client could connect; declare a \
         [[shared_access_policies]] or set allow_anonymous = true"
    );
    assert_eq!(
        refusal("[broker]\nallow_anonymous = false\n"),
        "broker.allow_anonymous (t.toml:2:19): is false (the default when absent) and no \
         shared access policy is declared, so no client could connect; declare a \
         [[shared_access_policies]] or set allow_anonymous = true"
    );
    let open = Config::parse("[broker]\nallow_anonymous = true\n", "t.toml").expect("valid");
    assert!(open.broker.allow_anonymous);
}

#[test]
fn bad_policies_are_refused_without_showing_the_key() {
    let policy = |body: &str| format!("[[shared_access_policies]]\n{body}\n");
    assert_eq!(
        refusal(&policy(
            "name = \"p\"\nkey = \"secret\"\nkey_env = \"K\"\nrights = [\"Send\"]"
        )),
        "shared_access_policies[0].key (t.toml:3:7): sets both `key` and `key_env`; set \
         exactly one"
    );
    assert_eq!(
        refusal(&policy("name = \"p\"\nrights = [\"Send\"]")),
        "shared_access_policies[0] (t.toml:2:8): sets no key; set `key` or `key_env`"
    );
    assert_eq!(
        refusal(&policy(
            "name = \"p\"\nkey = \"secret\"\nrights = [\"Read\"]"
        )),
        "shared_access_policies[0].rights (t.toml:4:11): \"Read\" is not a right; use \
         \"Manage\", \"Send\" or \"Listen\""
    );
    assert_eq!(
        refusal(&policy("name = \"p\"\nkey = \"secret\"\nrights = []")),
        "shared_access_policies[0].rights (t.toml:4:10): is empty; a policy grants at least \
         one of \"Manage\", \"Send\" and \"Listen\""
    );
    assert_eq!(
        refusal(&policy("name = \"p\"\nkey = \"\"\nrights = [\"Send\"]")),
        "shared_access_policies[0].key (t.toml:3:7): the key has 0 bytes; from 1 to 256 are \
         allowed"
    );
    let long = "k".repeat(257);
    let refused = refusal(&policy(&format!(
        "name = \"p\"\nkey = \"{long}\"\nrights = [\"Send\"]"
    )));
    assert!(!refused.contains(&long), "{refused}");
    assert!(refused.contains("257 bytes"), "{refused}");
    assert_eq!(
        refusal(&policy(
            "name = \"p\"\nkey_env = \"TIDEBUS_TEST_UNSET_VARIABLE\"\nrights = [\"Send\"]"
        )),
        "shared_access_policies[0].key_env (t.toml:3:11): the environment variable \
         \"TIDEBUS_TEST_UNSET_VARIABLE\" is not set or not valid UTF-8"
    );
    assert_eq!(
        refusal(&policy("name = \"a b\"\nkey = \"k\"\nrights = [\"Send\"]")),
        "shared_access_policies[0].name (t.toml:2:8): \"a b\" is not a valid policy name: ' ' \
         is not allowed; use letters, digits, '.', '_' and '-'"
    );
    let twice = format!(
        "{}{}",
        policy("name = \"p\"\nkey = \"k\"\nrights = [\"Send\"]"),
        policy("name = \"P\"\nkey = \"k\"\nrights = [\"Send\"]")
    );
    assert!(refusal(&twice).starts_with(
        "shared_access_policies[1].name (t.toml:6:8): policy name \"P\" is already used by \
         shared_access_policies[0].name"
    ));
}

#[test]
fn tls_is_read_and_listen_may_be_empty_with_it() {
    let config = parse(
        "[broker]\nlisten = \"\"\n[broker.tls]\nlisten = \"0.0.0.0:5671\"\n\
         cert = \"c.pem\"\nkey = \"k.pem\"\n",
    );
    assert_eq!(config.broker.listen, None);
    let tls = config.broker.tls.expect("tls");
    assert_eq!(tls.listen, "0.0.0.0:5671".parse().expect("address"));
    assert_eq!(tls.cert, PathBuf::from("c.pem"));
    assert_eq!(tls.key, PathBuf::from("k.pem"));
    assert_eq!(
        refusal("[broker]\nlisten = \"\"\n"),
        "broker.listen (t.toml:2:10): is empty and there is no [broker.tls]: the broker would \
         listen nowhere; give an address or configure TLS"
    );
    assert_eq!(
        refusal("[broker.tls]\nlisten = \"localhost:5671\"\ncert = \"c\"\nkey = \"k\"\n"),
        "broker.tls.listen (t.toml:2:10): \"localhost:5671\" is not a socket address; expected \
         IP:port such as \"127.0.0.1:5671\" or \"[::]:5671\" (host names are not resolved)"
    );
    assert_eq!(
        refusal("[broker.tls]\nlisten = \"127.0.0.1:5671\"\ncert = \"\"\nkey = \"k\"\n"),
        "broker.tls.cert (t.toml:3:8): must not be empty; expected the path of a PEM file"
    );
    assert!(refusal(
        "[broker]\nallow_anonymous = true\n[broker.tls]\nlisten = \"127.0.0.1:5671\"\ncert = \"c\"\n"
    )
    .starts_with("broker.tls (t.toml:3:1): missing field `key`"));
}

#[test]
fn the_admin_endpoint_listens_on_5300_unless_told_otherwise() {
    assert_eq!(
        parse("").admin.listen,
        Some("127.0.0.1:5300".parse().expect("address"))
    );
    assert_eq!(parse("[admin]\nlisten = \"\"\n").admin.listen, None);
    assert_eq!(
        parse("[admin]\nlisten = \"0.0.0.0:5301\"\n").admin.listen,
        Some("0.0.0.0:5301".parse().expect("address"))
    );
    assert_eq!(
        refusal("[admin]\nlisten = \"localhost\"\n"),
        "admin.listen (t.toml:2:10): \"localhost\" is not a socket address; expected IP:port \
         such as \"127.0.0.1:5300\" or \"[::]:5300\" (host names are not resolved)"
    );
}

#[test]
fn an_entity_s_policies_keep_both_keys_in_its_declaration() {
    let text = "[[queues]]\nname = \"q\"\n[[queues.shared_access_policies]]\nname = \"w\"\n\
                key = \"k1\"\nsecondary_key = \"k2\"\nrights = [\"Manage\"]\n";
    let declaration = Declaration::parse(text, "d").expect("valid");
    let Declaration::Queue(queue) = &declaration else {
        panic!("a queue: {declaration:?}");
    };
    let policy = &queue.shared_access_policies[0];
    assert_eq!(policy.secondary_key, Some(SecretKey::from("k2")));
    assert_eq!(policy.rights, Rights::ANY);
    let written = declaration.to_toml();
    assert!(
        written.contains("rights = [\"Manage\", \"Send\", \"Listen\"]"),
        "{written}"
    );
    assert_eq!(
        Declaration::parse(&written, "d").expect("reads back"),
        declaration
    );
}
