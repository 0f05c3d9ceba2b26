package differential;

import com.google.common.hash.Hashing;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.ServiceConfiguration;
import org.apache.pulsar.broker.namespace.NamespaceService;
import org.apache.pulsar.common.naming.NamespaceBundle;
import org.apache.pulsar.common.naming.NamespaceBundleFactory;
import org.apache.pulsar.common.naming.NamespaceName;
import sun.misc.Unsafe;

/**
 * The smallest stand-ins for a running broker that BundleSplitterTask and the split algorithms need.
 *
 * <p>Both need a PulsarService/NamespaceService only to ask two questions: how many bundles a namespace has, and
 * which topics a namespace has. The stubs override exactly those methods; everything else (which topics a bundle
 * owns, their hashes, the thresholds) is Pulsar's own code. Constructing the real services needs a metadata store,
 * so the stubs are allocated without running a constructor (Mockito is not on the classpath).
 */
final class StubServices {
    private StubServices() {
    }

    /** A PulsarService that only knows its configuration and its namespace service. */
    static final class Pulsar extends PulsarService {
        private ServiceConfiguration configuration;
        private NamespaceService namespaceService;

        private Pulsar() {
            super((ServiceConfiguration) null); // never called: instances come from allocate()
        }

        @Override
        public ServiceConfiguration getConfiguration() {
            return configuration;
        }

        @Override
        public NamespaceService getNamespaceService() {
            return namespaceService;
        }
    }

    /** A NamespaceService that answers bundle counts and the namespace's topic list from the test case. */
    static final class Namespaces extends NamespaceService {
        private Map<String, Integer> bundleCounts;
        private List<String> topics;

        private Namespaces() {
            super(null); // never called: instances come from allocate()
        }

        @Override
        public int getBundleCount(NamespaceName namespace) {
            return bundleCounts.getOrDefault(namespace.toString(), 0);
        }

        /** Pulsar's getOwnedTopicListForNamespaceBundle filters this list by the bundle's hash range. */
        @Override
        public CompletableFuture<List<String>> getFullListOfTopics(NamespaceName namespace) {
            return CompletableFuture.completedFuture(new ArrayList<>(topics));
        }

        @Override
        public CompletableFuture<List<String>> getAllPartitions(NamespaceName namespace) {
            return CompletableFuture.completedFuture(new ArrayList<>());
        }
    }

    static Pulsar pulsar(ServiceConfiguration configuration, NamespaceService namespaceService) throws Exception {
        Pulsar pulsar = allocate(Pulsar.class);
        pulsar.configuration = configuration;
        pulsar.namespaceService = namespaceService;
        return pulsar;
    }

    static Namespaces namespaces(Map<String, Integer> bundleCounts, List<String> topics) throws Exception {
        Namespaces namespaces = allocate(Namespaces.class);
        namespaces.bundleCounts = bundleCounts;
        namespaces.topics = topics;
        return namespaces;
    }

    /** A bundle whose factory hashes topic names with CRC-32, as NamespaceService builds it. */
    static NamespaceBundle bundle(String namespace, String range) throws Exception {
        NamespaceBundleFactory factory = allocate(NamespaceBundleFactory.class);
        Field hashFunction = NamespaceBundleFactory.class.getDeclaredField("hashFunc");
        hashFunction.setAccessible(true);
        hashFunction.set(factory, Hashing.crc32());
        return factory.getBundle(namespace, range);
    }

    private static <T> T allocate(Class<T> type) throws Exception {
        Field field = Unsafe.class.getDeclaredField("theUnsafe");
        field.setAccessible(true);
        return type.cast(((Unsafe) field.get(null)).allocateInstance(type));
    }
}
