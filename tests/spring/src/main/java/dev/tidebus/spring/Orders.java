package dev.tidebus.spring;

import com.azure.messaging.servicebus.ServiceBusMessage;
import com.azure.messaging.servicebus.ServiceBusSenderClient;
import org.springframework.stereotype.Service;

/** Sends orders with the sender client the starter configures. */
@Service
public class Orders {
    private final ServiceBusSenderClient sender;

    public Orders(ServiceBusSenderClient sender) {
        this.sender = sender;
    }

    public void place(String order) {
        sender.sendMessage(new ServiceBusMessage(order).setSubject("order"));
    }
}
