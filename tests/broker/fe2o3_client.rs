//! The fe2o3-amqp client against the real broker.

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::types::messaging::{Message, Outcome};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::support::{config_with_queues, TestBroker, DEADLINE};

async fn connect(broker: &TestBroker, max_frame_size: u32) -> ConnectionHandle<()> {
    let stream = TcpStream::connect(broker.addr).await.expect("tcp");
    stream.set_nodelay(true).expect("nodelay");
    Connection::builder()
        .container_id("fe2o3-test")
        .max_frame_size(max_frame_size)
        .open_with_stream(stream)
        .await
        .expect("open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_then_receive_round_trip() {
    let broker = TestBroker::start(config_with_queues(&["q"])).await;
    let mut connection = connect(&broker, 65536).await;
    let mut session = Session::begin(&mut connection).await.expect("begin");
    let mut sender = Sender::attach(&mut session, "s", "q").await.expect("sender");
    let outcome = timeout(DEADLINE, sender.send("hello")).await.expect("in time").expect("send");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    let mut receiver = Receiver::attach(&mut session, "r", "q").await.expect("receiver");
    let delivery = timeout(DEADLINE, receiver.recv::<String>()).await.expect("in time").expect("recv");
    assert_eq!(delivery.body(), "hello");
    receiver.accept(&delivery).await.expect("accept");
    let _: Message<String> = delivery.into_message();
    sender.close().await.expect("close sender");
    receiver.close().await.expect("close receiver");
    session.end().await.expect("end");
    connection.close().await.expect("close");
    broker.stop().await;
}
