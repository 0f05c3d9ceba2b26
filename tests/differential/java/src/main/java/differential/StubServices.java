package differential;

import com.github.benmanes.caffeine.cache.Caffeine;
import com.google.common.hash.Hashing;
import java.lang.reflect.Field;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.pulsar.broker.PulsarService;
import org.apache.pulsar.broker.ServiceConfiguration;
import org.apache.pulsar.broker.loadbalance.LoadManager;
import org.apache.pulsar.broker.namespace.NamespaceService;
import org.apache.pulsar.broker.resources.PulsarResources;
import org.apache.pulsar.broker.service.BrokerService;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.common.naming.NamespaceBundle;
import org.apache.pulsar.common.naming.NamespaceBundleFactory;
import org.apache.pulsar.common.naming.NamespaceName;
import org.apache.pulsar.policies.data.loadbalancer.NamespaceBundleStats;
import sun.misc.Unsafe;

/**
 * The smallest stand-ins for a running broker that BundleSplitterTask and the split algorithms need.
 *
 * <p>Both need a PulsarService/NamespaceService only to ask two questions: how many bundles a namespace has, and
 * which topics a namespace has. The stubs override exactly those methods; everything else (which topics a bundle
 * owns, their hashes, the thresholds) is Pulsar's own code. Constructing the real services needs a metadata store,
 * so the stubs are allocated without running a constructor (Mockito is not on the classpath).
 *
 * <p>The extensible load manager's split strategy asks a broker for its bundle stats and its load manager (for the
 * ownership channel), and the namespace service for its bundle factory and a split boundary: the stubs answer the
 * first two from the test case, and give the real NamespaceService methods the fields they read.
 */
final class StubServices {
    private StubServices() {
    }

    /** A PulsarService that only knows its configuration and its namespace service. */
    static final class Pulsar extends PulsarService {
        private ServiceConfiguration configuration;
        private NamespaceService namespaceService;
        private BrokerService brokerService;
        private AtomicReference<LoadManager> loadManager;
        private PulsarResources resources;
        private PulsarAdmin admin;

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

        @Override
        public BrokerService getBrokerService() {
            return brokerService;
        }

        @Override
        public AtomicReference<LoadManager> getLoadManager() {
            return loadManager;
        }

        @Override
        public PulsarResources getPulsarResources() {
            return resources;
        }

        @Override
        public synchronized PulsarAdmin getAdminClient() {
            return admin;
        }
    }

    /** What the leader's doLoadShedding reads besides: the metadata-store resources and the admin client. */
    static void leader(Pulsar pulsar, PulsarResources resources, PulsarAdmin admin) {
        pulsar.resources = resources;
        pulsar.admin = admin;
    }

    /**
     * An admin client that records each {@code namespaces().unloadNamespaceBundle(namespace, range, destination)}
     * as {namespace, range, destination} (destination null for the two-argument call), in call order; anything else
     * is unsupported.
     */
    static PulsarAdmin admin(List<String[]> unloadCalls) {
        var namespaces = (org.apache.pulsar.client.admin.Namespaces) Proxy.newProxyInstance(
                StubServices.class.getClassLoader(), new Class<?>[]{org.apache.pulsar.client.admin.Namespaces.class},
                (proxy, method, args) -> {
                    if (method.getName().equals("unloadNamespaceBundle") && args != null && args.length == 3) {
                        unloadCalls.add(new String[]{(String) args[0], (String) args[1], (String) args[2]});
                        return null;
                    }
                    if (method.getName().equals("unloadNamespaceBundle") && args != null && args.length == 2) {
                        // 3.0.0 unloads without a destination: the next lookup places the bundle.
                        unloadCalls.add(new String[]{(String) args[0], (String) args[1], null});
                        return null;
                    }
                    throw new UnsupportedOperationException(method.getName());
                });
        return (PulsarAdmin) Proxy.newProxyInstance(StubServices.class.getClassLoader(),
                new Class<?>[]{PulsarAdmin.class}, (proxy, method, args) -> {
                    if (method.getName().equals("namespaces")) {
                        return namespaces;
                    }
                    throw new UnsupportedOperationException(method.getName());
                });
    }

    /** A BrokerService that reports the test case's bundle stats as its own. */
    static final class Brokers extends BrokerService {
        private Map<String, NamespaceBundleStats> bundleStats;

        private Brokers() throws Exception {
            super(null, null); // never called: instances come from allocate()
        }

        @Override
        public Map<String, NamespaceBundleStats> getBundleStats() {
            return bundleStats;
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

    /**
     * A broker with the given bundle stats and load manager, whose namespace service has a bundle factory and the
     * configuration and broker its getSplitBoundary reads.
     */
    static Pulsar broker(ServiceConfiguration configuration, Namespaces namespaces,
                         Map<String, NamespaceBundleStats> bundleStats, LoadManager loadManager) throws Exception {
        Brokers brokers = allocate(Brokers.class);
        brokers.bundleStats = bundleStats;
        Pulsar pulsar = pulsar(configuration, namespaces);
        pulsar.brokerService = brokers;
        pulsar.loadManager = new AtomicReference<>(loadManager);
        setField(NamespaceService.class, namespaces, "config", configuration);
        setField(NamespaceService.class, namespaces, "pulsar", pulsar);
        setField(NamespaceService.class, namespaces, "bundleFactory", bundleFactory());
        return pulsar;
    }

    /** A bundle whose factory hashes topic names with CRC-32, as NamespaceService builds it. */
    static NamespaceBundle bundle(String namespace, String range) throws Exception {
        return bundleFactory().getBundle(namespace, range);
    }

    /** A bundle factory hashing with CRC-32, whose bundle cache (only invalidated here) loads nothing. */
    private static NamespaceBundleFactory bundleFactory() throws Exception {
        NamespaceBundleFactory factory = allocate(NamespaceBundleFactory.class);
        setField(NamespaceBundleFactory.class, factory, "hashFunc", Hashing.crc32());
        setField(NamespaceBundleFactory.class, factory, "bundlesCache",
                Caffeine.newBuilder().buildAsync(namespace -> null));
        return factory;
    }

    static void setField(Class<?> owner, Object target, String name, Object value) throws Exception {
        Field field = owner.getDeclaredField(name);
        field.setAccessible(true);
        field.set(target, value);
    }

    static <T> T allocate(Class<T> type) throws Exception {
        Field field = Unsafe.class.getDeclaredField("theUnsafe");
        field.setAccessible(true);
        return type.cast(((Unsafe) field.get(null)).allocateInstance(type));
    }
}
